#!/usr/bin/env python3
"""Quantized-weight fixtures: an independent numpy oracle for src/quant/ (test/quant-formats.test.ts).

    python3 scripts/make_quant_fixtures.py      (any Python 3 with numpy; Debian's python3-numpy will do)

Written from the C sources, not from this engine's TypeScript:
  - ggml-quants.c dequantize_row_q4_0 / q8_0 / q4_K (with get_scale_min_k4) / q6_K: every block
    decoded in float32 arithmetic in the C order of operations (q4_K: d1*q - m1 with d1 = d*sc and
    m1 = dmin*m; q6_K: (d*sc)*q; q4_0 / q8_0: q*d). FP16_TO_FP32 is exact (numpy float16 → float32).
  - ONNX Runtime's MatMulNBits dequantization (4 and 8 bits, with and without packed zero points,
    default zero point 2^(bits-1), a partial last block, float32 or float16 scales): w = (q - zp) * scale.
  - ggml's reference quantizers quantize_row_q4_0_ref (d = max / -8, id = 1/d, MIN(15, (int8)(x*id +
    8.5))) and quantize_row_q8_0_ref (d = amax / 127, roundf(x*id)), in float32, FP32_TO_FP16 round to
    nearest even (as F16C and ggml's fallback do).

Blocks are random bytes with the f16 scale fields drawn finite (a random sign, an exponent in
[2^-14, 2^1), a random 10-bit mantissa), so every value is an ordinary float. Written to
test/fixtures/quant/:
  dequantize.json   cases [{name, dtype, shape, bits?, blockSize?, data, scales?, scalesType?,
                    zeroPoints?, expected}] with byte arrays base64 (expected: float32 little-endian)
  quantize.json     cases [{name, dtype, shape, input (float32 LE base64), data (the ggml blocks)}]
"""

import base64
import json
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'fixtures', 'quant')
F32 = np.float32
rng = np.random.default_rng(20250)


def b64(a):
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode('ascii')


def random_f16(n):
    """n finite float16 values: random sign, exponent in [-14, 0], random mantissa (as uint16 bits)."""
    sign = rng.integers(0, 2, n).astype(np.uint16) << 15
    exp = rng.integers(1, 16, n).astype(np.uint16) << 10  # biased exponents 1..15: 2^-14 … 2^0
    mant = rng.integers(0, 1024, n).astype(np.uint16)
    return sign | exp | mant


def f16_bits_to_f32(bits):
    return np.asarray(bits, dtype='<u2').view(np.float16).astype(F32)


# ——— ggml dequantization (ggml-quants.c) ———

def deq_q4_0(data, N, K):
    blk = np.frombuffer(data, np.uint8).reshape(N * K // 32, 18)
    d = f16_bits_to_f32(blk[:, 0].astype(np.uint16) | (blk[:, 1].astype(np.uint16) << 8))[:, None]
    qs = blk[:, 2:]
    lo = (qs & 0x0F).astype(np.int32) - 8
    hi = (qs >> 4).astype(np.int32) - 8
    y = np.concatenate([lo.astype(F32) * d, hi.astype(F32) * d], axis=1)  # x0*d: int → float, one rounding
    return y.astype(F32).reshape(N, K)


def deq_q8_0(data, N, K):
    blk = np.frombuffer(data, np.uint8).reshape(N * K // 32, 34)
    d = f16_bits_to_f32(blk[:, 0].astype(np.uint16) | (blk[:, 1].astype(np.uint16) << 8))[:, None]
    qs = blk[:, 2:].view(np.int8).astype(F32)
    return (qs * d).astype(F32).reshape(N, K)


def scale_min_k4(j, q):
    """get_scale_min_k4 for the 12 scale bytes q (shape [blocks, 12]), sub-block j."""
    q = q.astype(np.int32)
    if j < 4:
        return q[:, j] & 63, q[:, j + 4] & 63
    return (q[:, j + 4] & 0xF) | ((q[:, j - 4] >> 6) << 4), (q[:, j + 4] >> 4) | ((q[:, j] >> 6) << 4)


def deq_q4_k(data, N, K):
    blk = np.frombuffer(data, np.uint8).reshape(N * K // 256, 144)
    d = f16_bits_to_f32(blk[:, 0].astype(np.uint16) | (blk[:, 1].astype(np.uint16) << 8))
    dmin = f16_bits_to_f32(blk[:, 2].astype(np.uint16) | (blk[:, 3].astype(np.uint16) << 8))
    scales = blk[:, 4:16]
    qs = blk[:, 16:]
    out = np.zeros((blk.shape[0], 256), F32)
    for c in range(4):  # j = 64·c; sub-blocks is = 2c, 2c + 1
        q = qs[:, 32 * c:32 * c + 32]
        for half, sub in ((0, 2 * c), (1, 2 * c + 1)):
            sc, m = scale_min_k4(sub, scales)
            d1 = (d * sc.astype(F32)).astype(F32)[:, None]
            m1 = (dmin * m.astype(F32)).astype(F32)[:, None]
            qv = (q & 0xF) if half == 0 else (q >> 4)
            out[:, 64 * c + 32 * half:64 * c + 32 * half + 32] = (d1 * qv.astype(F32)).astype(F32) - m1
    return out.reshape(N, K)


def deq_q6_k(data, N, K):
    blk = np.frombuffer(data, np.uint8).reshape(N * K // 256, 210)
    ql = blk[:, 0:128].astype(np.int32)
    qh = blk[:, 128:192].astype(np.int32)
    sc = blk[:, 192:208].view(np.int8).astype(F32)
    d = f16_bits_to_f32(blk[:, 208].astype(np.uint16) | (blk[:, 209].astype(np.uint16) << 8))
    out = np.zeros((blk.shape[0], 256), F32)
    for n in range(2):  # halves of 128: ql += 64, qh += 32, sc += 8
        L = ql[:, 64 * n:64 * n + 64]
        H = qh[:, 32 * n:32 * n + 32]
        S = sc[:, 8 * n:8 * n + 8]
        for l in range(32):
            is_ = l // 16
            q1 = ((L[:, l] & 0xF) | (((H[:, l] >> 0) & 3) << 4)) - 32
            q2 = ((L[:, l + 32] & 0xF) | (((H[:, l] >> 2) & 3) << 4)) - 32
            q3 = ((L[:, l] >> 4) | (((H[:, l] >> 4) & 3) << 4)) - 32
            q4 = ((L[:, l + 32] >> 4) | (((H[:, l] >> 6) & 3) << 4)) - 32
            for off, q, s in ((0, q1, 0), (32, q2, 2), (64, q3, 4), (96, q4, 6)):
                ds = (d * S[:, is_ + s]).astype(F32)  # d * sc[is] first (left to right), then * q
                out[:, 128 * n + off + l] = (ds * q.astype(F32)).astype(F32)
    return out.reshape(N, K)


# ——— ONNX Runtime MatMulNBits dequantization ———

def deq_nbits(data, scales, zero_points, bits, block, N, K):
    nb = -(-K // block)
    blob = block * bits // 8
    raw = np.frombuffer(data, np.uint8).reshape(N, nb, blob)
    if bits == 4:
        q = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(N, nb, block)  # low nibble first
    else:
        q = raw.reshape(N, nb, block)
    if zero_points is None:
        zp = np.full((N, nb), 1 << (bits - 1), np.int32)
    else:
        zrow = -(-nb * bits // 8)
        zb = np.frombuffer(zero_points, np.uint8).reshape(N, zrow)
        if bits == 8:
            zp = zb.astype(np.int32)
        else:
            zp = np.stack([zb & 0xF, zb >> 4], axis=-1).reshape(N, 2 * zrow)[:, :nb].astype(np.int32)
    s = scales.astype(F32).reshape(N, nb)
    w = ((q.astype(np.int32) - zp[:, :, None]).astype(F32) * s[:, :, None]).astype(F32)
    return w.reshape(N, nb * block)[:, :K]


# ——— ggml reference quantizers (q4_0, q8_0) ———

def quant_q4_0_ref(x, N, K):
    x = x.reshape(-1, 32).astype(F32)
    out = np.zeros((x.shape[0], 18), np.uint8)
    for i, v in enumerate(x):
        amax, mx = F32(0), F32(0)
        for val in v:
            if amax < abs(val):
                amax, mx = abs(val), val
        d = F32(mx / F32(-8))
        idv = F32(F32(1) / d) if d != 0 else F32(0)
        dbits = np.array([d], F32).astype(np.float16).view(np.uint16)[0]
        out[i, 0], out[i, 1] = dbits & 0xFF, dbits >> 8
        x0 = (v[:16] * idv).astype(F32) + F32(8.5)
        x1 = (v[16:] * idv).astype(F32) + F32(8.5)
        xi0 = np.minimum(15, np.trunc(x0.astype(F32)).astype(np.int32))  # (int8_t) truncates; x + 8.5 > 0
        xi1 = np.minimum(15, np.trunc(x1.astype(F32)).astype(np.int32))
        out[i, 2:] = (xi0 | (xi1 << 4)).astype(np.uint8)
    return out.reshape(-1)


def roundf(v):
    """C roundf: half away from zero (exact: a float32 plus 0.5 is exact in float64)."""
    v = v.astype(np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def quant_q8_0_ref(x, N, K):
    x = x.reshape(-1, 32).astype(F32)
    out = np.zeros((x.shape[0], 34), np.uint8)
    for i, v in enumerate(x):
        amax = F32(np.max(np.abs(v)))
        d = F32(amax / F32(127))
        idv = F32(F32(1) / d) if d != 0 else F32(0)
        dbits = np.array([d], F32).astype(np.float16).view(np.uint16)[0]
        out[i, 0], out[i, 1] = dbits & 0xFF, dbits >> 8
        out[i, 2:] = roundf((v * idv).astype(F32)).astype(np.int8).view(np.uint8)
    return out.reshape(-1)


# ——— the cases ———

def gguf_case(name, dtype, N, K):
    blocks = N * K // (32 if dtype in ('q4_0', 'q8_0') else 256)
    size = {'q4_0': 18, 'q8_0': 34, 'q4_k': 144, 'q6_k': 210}[dtype]
    raw = rng.integers(0, 256, (blocks, size), dtype=np.uint8)
    f16_at = {'q4_0': [0], 'q8_0': [0], 'q4_k': [0, 2], 'q6_k': [208]}[dtype]
    for at in f16_at:
        bits = random_f16(blocks)
        raw[:, at], raw[:, at + 1] = bits & 0xFF, bits >> 8
    data = raw.reshape(-1).tobytes()
    deq = {'q4_0': deq_q4_0, 'q8_0': deq_q8_0, 'q4_k': deq_q4_k, 'q6_k': deq_q6_k}[dtype](data, N, K)
    return {'name': name, 'dtype': dtype, 'shape': [N, K], 'data': b64(np.frombuffer(data, np.uint8)), 'expected': b64(deq.astype('<f4'))}


def nbits_case(name, bits, block, N, K, zero_points, scales_type):
    nb = -(-K // block)
    data = rng.integers(0, 256, N * nb * block * bits // 8, dtype=np.uint8)
    if scales_type == 'f16':
        sbits = random_f16(N * nb)
        scales = f16_bits_to_f32(sbits)
        scales_bytes = sbits.astype('<u2')
    else:
        scales = (rng.standard_normal(N * nb) * 0.05).astype(F32)
        scales_bytes = scales.astype('<f4')
    zp = rng.integers(0, 256, N * -(-nb * bits // 8), dtype=np.uint8) if zero_points else None
    deq = deq_nbits(data.tobytes(), scales, None if zp is None else zp.tobytes(), bits, block, N, K)
    case = {'name': name, 'dtype': 'nbits', 'bits': bits, 'blockSize': block, 'shape': [N, K], 'data': b64(data),
            'scales': b64(scales_bytes), 'scalesType': scales_type, 'expected': b64(deq.astype('<f4'))}
    if zp is not None:
        case['zeroPoints'] = b64(zp)
    return case


def quant_case(name, dtype, N, K, x):
    x = x.astype(F32).reshape(N, K)
    q = (quant_q4_0_ref if dtype == 'q4_0' else quant_q8_0_ref)(x, N, K)
    # the round trip through this script's own dequantizer must stay within the RTN bound
    deq = (deq_q4_0 if dtype == 'q4_0' else deq_q8_0)(q.tobytes(), N, K)
    assert np.all(np.isfinite(deq))
    return {'name': name, 'dtype': dtype, 'shape': [N, K], 'input': b64(x.astype('<f4')), 'data': b64(q)}


def main():
    os.makedirs(OUT, exist_ok=True)
    deq_cases = [
        gguf_case('q4_0 3x64', 'q4_0', 3, 64),
        gguf_case('q8_0 3x64', 'q8_0', 3, 64),
        gguf_case('q4_k 2x512', 'q4_k', 2, 512),
        gguf_case('q6_k 2x512', 'q6_k', 2, 512),
    ]
    for bits in (4, 8):
        for zp in (False, True):
            for stype in ('f32', 'f16'):
                tag = f"nbits{bits}{' zp' if zp else ''} {stype}"
                deq_cases.append(nbits_case(f'{tag} K=64 b32', bits, 32, 3, 64, zp, stype))
                deq_cases.append(nbits_case(f'{tag} K=40 b16 (partial last block)', bits, 16, 3, 40, zp, stype))
    # odd block count with 4-bit zero points: the last zero-point byte of a row is half used
    deq_cases.append(nbits_case('nbits4 zp K=70 b32 (3 blocks)', 4, 32, 2, 70, True, 'f32'))
    with open(os.path.join(OUT, 'dequantize.json'), 'w') as f:
        json.dump({'cases': deq_cases}, f, indent=0)

    x = (rng.standard_normal(4 * 64) * 0.1).astype(F32)
    x[0:32] = 0  # an all-zero block: d = 0, id = 0
    x[32:64] = np.linspace(-1, 0.5, 32, dtype=F32)  # its max-|x| value is negative
    x[64:96] = np.arange(32, dtype=F32) - 16  # integers: ties at x·id + 8.5 / roundf
    quant_cases = [quant_case('q4_0 4x64', 'q4_0', 4, 64, x), quant_case('q8_0 4x64', 'q8_0', 4, 64, x)]
    y = (rng.standard_normal(3 * 96) * 2).astype(F32)
    quant_cases += [quant_case('q4_0 3x96 wide', 'q4_0', 3, 96, y), quant_case('q8_0 3x96 wide', 'q8_0', 3, 96, y)]
    with open(os.path.join(OUT, 'quantize.json'), 'w') as f:
        json.dump({'cases': quant_cases}, f, indent=0)
    print(f'wrote {len(deq_cases)} dequantize and {len(quant_cases)} quantize cases to {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
