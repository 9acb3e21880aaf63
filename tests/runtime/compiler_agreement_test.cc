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

// The ViT and audio encoder do not agree yet: the compiler counts HF-style
// encoders (CLS token, Whisper's stem), the runtime builds simpler ones; for
// a 2-layer, 32-wide audio encoder over 16 mel bins it is 22,240 (compiler)
// vs 21,824 (built). Reconciling them is open work (see the issue notes).
TEST(CompilerRuntimeAgreement, Projector) {
  ModelDesc proj;
  proj.kind = ModelKind::kProjector;
  proj.in_dim = 48;
  proj.out_dim = 64;
  ExpectAgree(proj, "projector");
}

}  // namespace
}  // namespace maestro
