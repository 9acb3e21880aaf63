// SPDX-License-Identifier: Apache-2.0
// The compiler plans with analytic parameter counts (compiler/model.h); the
// runtime builds real modules (runtime/models/model_desc.h). For every model
// kind, both must count the same parameters for the same descriptor, or the
// planner's memory and FLOP estimates describe a model that never runs.
#include <gtest/gtest.h>

#include "compiler/model.h"
#include "runtime/models/model_desc.h"

namespace maestro {
namespace {

using plan::ModelDesc;
using plan::ModelKind;

ModelDesc Decoder(bool moe, bool tied) {
  ModelDesc d;
  d.kind = ModelKind::kDecoder;
  d.hidden = 64;
  d.layers = 2;
  d.heads = 4;
  d.kv_heads = 2;
  d.ffn_hidden = 176;
  d.vocab = 97;
  d.tie_embeddings = tied;
  if (moe) {
    d.experts = 4;
    d.experts_per_token = 2;
    d.moe_ffn_hidden = 96;
  }
  return d;
}

void ExpectAgree(const ModelDesc& d, const char* what) {
  ASSERT_TRUE(compiler::CheckModelShape(d, what).ok()) << what;
  const auto built = runtime::ParameterCount(d);
  ASSERT_TRUE(built.ok()) << what << ": " << built.status().ToString();
  EXPECT_EQ(compiler::ComputeModelFacts(d, 0).params, *built) << what;
}

TEST(CompilerRuntimeAgreement, DecoderDenseMoeAndTied) {
  ExpectAgree(Decoder(false, false), "dense decoder");
  ExpectAgree(Decoder(true, false), "MoE decoder");
  ExpectAgree(Decoder(false, true), "tied decoder");
}

// The ViT the runtime builds has no CLS token (as in Qwen2-VL / SigLIP
// encoders); the spec says so with cls_token = false, and the compiler then
// counts what is built, patch merger included. The audio encoder still
// disagrees: the compiler counts Whisper's stem, the runtime builds a simpler
// one (22,240 vs 21,824 for a 2-layer, 32-wide encoder over 16 mel bins).
ModelDesc Vit(int64_t merge) {
  ModelDesc d;
  d.kind = ModelKind::kVit;
  d.hidden = 32;
  d.layers = 2;
  d.heads = 4;
  d.ffn_hidden = 64;
  d.image_size = 28;
  d.patch_size = 7;
  d.channels = 1;
  d.extra["cls_token"] = 0;
  if (merge > 0) {
    d.extra["spatial_merge"] = static_cast<double>(merge);
    d.extra["merger_hidden"] = 48;
    d.out_dim = 40;
  }
  return d;
}

TEST(CompilerRuntimeAgreement, VitWithoutClsTokenWithAndWithoutPatchMerger) {
  ExpectAgree(Vit(0), "vit");
  ExpectAgree(Vit(1), "vit with a 1x1 merger");
  ExpectAgree(Vit(2), "vit with a 2x2 merger");
}

TEST(CompilerRuntimeAgreement, Projector) {
  ModelDesc proj;
  proj.kind = ModelKind::kProjector;
  proj.in_dim = 48;
  proj.out_dim = 64;
  ExpectAgree(proj, "projector");
}

}  // namespace
}  // namespace maestro
