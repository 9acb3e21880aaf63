#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Torch reference for tests/datasets/audio_features_test.cc.

    python3 whisper_features_reference.py CASES

CASES is a text file, one case a line:
"AUDIO_FILE MEL_BINS FRAMES OUT_FILE RESAMPLER". For each, this script reads
AUDIO_FILE with soundfile (libsndfile), averages its channels, resamples it to
16 kHz and computes Whisper's log-mel features written from the published
recipe, in float64 with torch. RESAMPLER is

  - "ideal": an ideal band-limited resampler (the FFT of the whole clip, cut
    or zero-extended to the new length: exact for a periodic band-limited
    signal, which a clip that fades in and out from zero with content well
    below both Nyquists is);
  - "soxr": libsoxr's one-shot resampler at its very-high quality (28-bit,
    linear phase), called through ctypes on float64 samples: the maintained
    library the issue names, the same filter the C++ asks for, so what is
    compared is the decoding, the channel mix and the features.

Whisper's feature extractor itself takes 16 kHz audio only; the two
resamplers differ where a 16-bit file's quantization noise sits in soxr's
transition band (the test's comment gives the figures).

The features:

  - the waveform cut or zero-padded to FRAMES * 160 samples;
  - torch.stft(n_fft=400, hop=160, torch.hann_window(400, periodic=True),
    center=True, pad_mode="reflect"), power |X|^2;
  - Slaney-scale mel filters from 0 to 8000 Hz (mel = 3 f / 200 below
    1 kHz, 15 + 27 ln(f / 1000) / ln 6.4 above), triangles over the rfft
    bins' frequencies with Slaney's area norm 2 / (f_hi - f_lo);
  - log10(max(mel, 1e-10)), the last STFT frame dropped, floored at the
    max - 8, then (x + 4) / 4.

It writes OUT_FILE: MEL_BINS * FRAMES float32, row-major (mel, frame). It is
written from the formulas, not from the C++ (datasets/audio_features.cc).
Exits 3 when torch or soundfile cannot be imported (the test's fixture then
tries the next python3).
"""
import ctypes
import ctypes.util
import math
import sys

NO_TORCH_EXIT_CODE = 3  # tests/fixtures/python3.h knows it

try:
    import torch
except ImportError as e:  # pragma: no cover
    print(f"cannot import torch: {e}")
    sys.exit(NO_TORCH_EXIT_CODE)
try:
    import soundfile
except ImportError as e:  # pragma: no cover
    print(f"cannot import soundfile (Debian: python3-soundfile): {e}")
    sys.exit(NO_TORCH_EXIT_CODE)

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
F_MAX = 8000.0


def read_mono(path):
    data, rate = soundfile.read(path, dtype="float64", always_2d=True)
    return torch.from_numpy(data).mean(dim=1), rate


def ideal_resample(x, rate):
    """Band-limited resampling of the whole clip through its spectrum."""
    if rate == SAMPLE_RATE:
        return x
    n = x.numel()
    m = n * SAMPLE_RATE // rate
    assert m * rate == n * SAMPLE_RATE, "clip lengths must be whole at both rates"
    spectrum = torch.fft.rfft(x)
    kept = torch.zeros(m // 2 + 1, dtype=spectrum.dtype)
    k = min(spectrum.numel(), kept.numel())
    kept[:k] = spectrum[:k]
    return torch.fft.irfft(kept, n=m) * (m / n)


class SoxrQualitySpec(ctypes.Structure):
    _fields_ = [("precision", ctypes.c_double), ("phase_response", ctypes.c_double),
                ("passband_end", ctypes.c_double), ("stopband_begin", ctypes.c_double),
                ("e", ctypes.c_void_p), ("flags", ctypes.c_ulong)]


class SoxrIoSpec(ctypes.Structure):
    _fields_ = [("itype", ctypes.c_int), ("otype", ctypes.c_int), ("scale", ctypes.c_double),
                ("e", ctypes.c_void_p), ("flags", ctypes.c_ulong)]


SOXR_FLOAT64_I = 1  # soxr.h: soxr_datatype_t
SOXR_VHQ = 6  # soxr.h: SOXR_28_BITQ


def soxr_resample(x, rate):
    """libsoxr's one-shot resampling of float64 samples to SAMPLE_RATE."""
    if rate == SAMPLE_RATE:
        return x
    soxr = ctypes.CDLL(ctypes.util.find_library("soxr") or "libsoxr.so.0")
    soxr.soxr_quality_spec.restype = SoxrQualitySpec
    soxr.soxr_quality_spec.argtypes = [ctypes.c_ulong, ctypes.c_ulong]
    soxr.soxr_oneshot.restype = ctypes.c_char_p
    soxr.soxr_oneshot.argtypes = [ctypes.c_double, ctypes.c_double, ctypes.c_uint, ctypes.c_void_p,
                                  ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                                  ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(SoxrIoSpec),
                                  ctypes.POINTER(SoxrQualitySpec), ctypes.c_void_p]
    quality = soxr.soxr_quality_spec(SOXR_VHQ, 0)
    io = SoxrIoSpec(SOXR_FLOAT64_I, SOXR_FLOAT64_I, 1.0, None, 0)
    n = x.numel()
    m = (2 * n * SAMPLE_RATE + rate) // (2 * rate)  # round(n * 16000 / rate), half up
    x = x.contiguous()
    out = torch.zeros(m + 16, dtype=torch.float64)
    in_done, out_done = ctypes.c_size_t(0), ctypes.c_size_t(0)
    error = soxr.soxr_oneshot(float(rate), float(SAMPLE_RATE), 1, x.data_ptr(), n, ctypes.byref(in_done),
                              out.data_ptr(), out.numel(), ctypes.byref(out_done), ctypes.byref(io),
                              ctypes.byref(quality), None)
    assert error is None, error
    out[out_done.value:] = 0.0  # a last sample soxr did not give is a zero
    return out[:m]


def hz_to_mel(f):
    return 3.0 * f / 200.0 if f < 1000.0 else 15.0 + 27.0 * math.log(f / 1000.0) / math.log(6.4)


def mel_to_hz(mel):
    return 200.0 * mel / 3.0 if mel < 15.0 else 1000.0 * math.exp((mel - 15.0) * math.log(6.4) / 27.0)


def slaney_filters(mel_bins):
    """(mel_bins, N_FFT / 2 + 1) triangles, Slaney-normalised."""
    lo, hi = hz_to_mel(0.0), hz_to_mel(F_MAX)
    edges = [mel_to_hz(lo + (hi - lo) * i / (mel_bins + 1)) for i in range(mel_bins + 2)]
    freqs = torch.fft.rfftfreq(N_FFT, d=1.0 / SAMPLE_RATE).to(torch.float64)
    filters = torch.zeros(mel_bins, freqs.numel(), dtype=torch.float64)
    for m in range(mel_bins):
        f_lo, f_c, f_hi = edges[m], edges[m + 1], edges[m + 2]
        rising = (freqs - f_lo) / (f_c - f_lo)
        falling = (f_hi - freqs) / (f_hi - f_c)
        filters[m] = torch.clamp(torch.minimum(rising, falling), min=0.0) * (2.0 / (f_hi - f_lo))
    return filters


def log_mel(x, mel_bins, frames):
    n = frames * HOP
    x = x[:n]
    if x.numel() < n:
        x = torch.cat([x, torch.zeros(n - x.numel(), dtype=x.dtype)])
    window = torch.hann_window(N_FFT, periodic=True, dtype=torch.float64)
    stft = torch.stft(x, n_fft=N_FFT, hop_length=HOP, window=window, center=True, pad_mode="reflect",
                      return_complex=True)
    power = stft.abs() ** 2  # (201, frames + 1)
    mel = slaney_filters(mel_bins) @ power
    logs = torch.log10(torch.clamp(mel, min=1e-10))[:, :-1]
    logs = torch.maximum(logs, logs.max() - 8.0)
    return (logs + 4.0) / 4.0


def main():
    with open(sys.argv[1]) as f:
        cases = [line.split() for line in f if line.strip()]
    resamplers = {"ideal": ideal_resample, "soxr": soxr_resample}
    for audio_file, mel_bins, frames, out_file, resampler in cases:
        x, rate = read_mono(audio_file)
        features = log_mel(resamplers[resampler](x, rate), int(mel_bins), int(frames))
        assert features.shape == (int(mel_bins), int(frames)), features.shape
        with open(out_file, "wb") as out:
            out.write(features.to(torch.float32).contiguous().numpy().tobytes())


if __name__ == "__main__":
    main()
