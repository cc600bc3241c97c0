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
  - ggml's quantize_row_q4_K_ref (make_qkx2_quants search, 6-bit scales and mins) and
    quantize_row_q6_K_ref (make_qx_quants, rmse_type 1), in scalar float32: a second transcription
    of the C, beside src/quant/quantize-k.ts (the same author, another language; no C build here).

Blocks are random bytes with the f16 scale fields drawn finite (a random sign, an exponent in
[2^-14, 2^1), a random 10-bit mantissa), so every value is an ordinary float. Written to
test/fixtures/quant/:
  dequantize.json   cases [{name, dtype, shape, bits?, blockSize?, data, scales?, scalesType?,
                    zeroPoints?, expected}] with byte arrays base64 (expected: float32 little-endian)
  quantize.json     cases [{name, dtype, shape, input (float32 LE base64), data (the ggml blocks)}] for
                    q4_0, q8_0, q4_k, q6_k (zero blocks, negative maxima, ties, mixed scales)
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


# ——— ggml reference quantizers (q4_K, q6_K), scalar float32, transcribed from the C a second time ———

def nearest_int(v):
    """ggml's nearest_int: (v + 1.5·2^23) in float32 → round half to even."""
    return int(F32(F32(v) + F32(12582912)) - F32(12582912))


def fp16(v):
    """(bits, value) of GGML_FP32_TO_FP16(v)."""
    h = np.array([v], F32).astype(np.float16)
    return int(h.view(np.uint16)[0]), F32(h[0])


def make_qkx2_quants(nmax, x, weights, rmin, rdelta, nstep):
    n = len(x)
    mn, mx = x[0], x[0]
    sum_w = weights[0]
    sum_x = F32(sum_w * x[0])
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        sum_w = F32(sum_w + weights[i])
        sum_x = F32(sum_x + F32(weights[i] * x[i]))
    if mn > 0:
        mn = F32(0)
    if mx == mn:
        return F32(0), F32(-mn), [0] * n
    iscale = F32(F32(nmax) / F32(mx - mn))
    scale = F32(F32(1) / iscale)
    L = [max(0, min(nmax, nearest_int(F32(iscale * F32(x[i] - mn))))) for i in range(n)]
    best = F32(0)
    for i in range(n):
        diff = F32(F32(F32(scale * F32(L[i])) + mn) - x[i])
        best = F32(best + F32(weights[i] * F32(diff * diff)))
    for step in range(nstep + 1):
        iscale = F32(F32(F32(rmin + F32(rdelta * F32(step))) + F32(nmax)) / F32(mx - mn))
        aux = [max(0, min(nmax, nearest_int(F32(iscale * F32(x[i] - mn))))) for i in range(n)]
        sl, sl2, sxl = F32(0), F32(0), F32(0)
        for i in range(n):
            w, l = weights[i], F32(aux[i])
            sl = F32(sl + F32(w * l))
            sl2 = F32(sl2 + F32(F32(w * l) * l))
            sxl = F32(sxl + F32(F32(w * l) * x[i]))
        D = F32(F32(sum_w * sl2) - F32(sl * sl))
        if D > 0:
            this_scale = F32(F32(F32(sum_w * sxl) - F32(sum_x * sl)) / D)
            this_min = F32(F32(F32(sl2 * sum_x) - F32(sl * sxl)) / D)
            if this_min > 0:
                this_min = F32(0)
                this_scale = F32(sxl / sl2)
            err = F32(0)
            for i in range(n):
                diff = F32(F32(F32(this_scale * F32(aux[i])) + this_min) - x[i])
                err = F32(err + F32(weights[i] * F32(diff * diff)))
            if err < best:
                L, best, scale, mn = aux, err, this_scale, this_min
    return scale, F32(-mn), L


def quant_q4_k_ref(x, N, K):
    out = bytearray()
    for xb in x.astype(F32).reshape(-1, 256):
        L = [0] * 256
        scales, mins = [F32(0)] * 8, [F32(0)] * 8
        for j in range(8):
            xs = [F32(v) for v in xb[32 * j:32 * j + 32]]
            sum_x2 = F32(0)
            for v in xs:
                sum_x2 = F32(sum_x2 + F32(v * v))
            av_x = F32(np.sqrt(F32(sum_x2 / F32(32))))
            w = [F32(av_x + abs(v)) for v in xs]
            scales[j], mins[j], L[32 * j:32 * j + 32] = make_qkx2_quants(15, xs, w, F32(-1), F32(0.1), 20)
        max_scale = max([F32(0)] + [s for s in scales])
        max_min = max([F32(0)] + [m for m in mins])
        inv_scale = F32(F32(63) / max_scale) if max_scale > 0 else F32(0)
        inv_min = F32(F32(63) / max_min) if max_min > 0 else F32(0)
        sc = [0] * 12
        for j in range(8):
            ls = min(63, nearest_int(F32(inv_scale * scales[j])) & 0xFF)
            lm = min(63, nearest_int(F32(inv_min * mins[j])) & 0xFF)
            if j < 4:
                sc[j], sc[j + 4] = ls, lm
            else:
                sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
                sc[j - 4] |= (ls >> 4) << 6
                sc[j] |= (lm >> 4) << 6
        dbits, dval = fp16(F32(max_scale / F32(63)))
        mbits, mval = fp16(F32(max_min / F32(63)))
        scb = np.array(sc, np.uint8)[None, :]
        for j in range(8):
            s, m = (int(v[0]) for v in scale_min_k4(j, scb))
            d = F32(dval * F32(s))
            if d == 0:
                continue
            dm = F32(mval * F32(m))
            for i in range(32):
                L[32 * j + i] = max(0, min(15, nearest_int(F32(F32(xb[32 * j + i] + dm) / d))))
        qs = [L[64 * c + l] | (L[64 * c + l + 32] << 4) for c in range(4) for l in range(32)]
        out += bytes([dbits & 0xFF, dbits >> 8, mbits & 0xFF, mbits >> 8]) + bytes(sc) + bytes(qs)
    return np.frombuffer(bytes(out), np.uint8)


def make_qx_quants(nmax, x):
    """make_qx_quants with rmse_type 1 and no importance weights (w = x²); returns (scale, L + nmax)."""
    n = len(x)
    mx, amax = F32(0), F32(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = abs(v), v
    if amax < F32(1e-15):
        return F32(0), [0] * n

    def sums(iscale):
        ls = [max(-nmax, min(nmax - 1, nearest_int(F32(iscale * v)))) for v in x]
        slx, sl2 = F32(0), F32(0)
        for v, l in zip(x, ls):
            w = F32(v * v)
            slx = F32(slx + F32(F32(w * v) * F32(l)))
            sl2 = F32(sl2 + F32(F32(w * F32(l)) * F32(l)))
        return ls, slx, sl2

    ls, slx, sl2 = sums(F32(F32(-nmax) / mx))
    L = [l + nmax for l in ls]
    scale = F32(slx / sl2) if sl2 else F32(0)
    best = F32(scale * slx)
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = F32(-F32(F32(nmax) + F32(F32(0.1) * F32(step))) / mx)
        ls, slx, sl2 = sums(iscale)
        if sl2 > 0 and F32(slx * slx) > F32(best * sl2):
            L = [l + nmax for l in ls]
            scale = F32(slx / sl2)
            best = F32(scale * slx)
    return scale, L


def quant_q6_k_ref(x, N, K):
    out = bytearray()
    for xb in x.astype(F32).reshape(-1, 256):
        xs = [F32(v) for v in xb]
        L = [0] * 256
        scales = [F32(0)] * 16
        max_scale, max_abs = F32(0), F32(0)
        for ib in range(16):
            scales[ib], L[16 * ib:16 * ib + 16] = make_qx_quants(32, xs[16 * ib:16 * ib + 16])
            if abs(scales[ib]) > max_abs:
                max_abs, max_scale = abs(scales[ib]), scales[ib]
        if max_abs < F32(1e-15):
            out += bytes(210)
            continue
        iscale = F32(F32(-128) / max_scale)
        dbits, dval = fp16(F32(F32(1) / iscale))
        sc = [min(127, nearest_int(F32(iscale * s))) for s in scales]
        for j in range(16):
            d = F32(dval * F32(sc[j]))
            if d == 0:
                continue
            for i in range(16):
                L[16 * j + i] = max(-32, min(31, nearest_int(F32(xs[16 * j + i] / d)))) + 32
        ql, qh = [0] * 128, [0] * 64
        for h in range(2):
            for l in range(32):
                q1, q2, q3, q4 = (L[128 * h + l + o] for o in (0, 32, 64, 96))
                ql[64 * h + l] = (q1 & 0xF) | ((q3 & 0xF) << 4)
                ql[64 * h + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4)
                qh[32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
        out += bytes(ql) + bytes(qh) + bytes(v & 0xFF for v in sc) + bytes([dbits & 0xFF, dbits >> 8])
    return np.frombuffer(bytes(out), np.uint8)


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
    q = {'q4_0': quant_q4_0_ref, 'q8_0': quant_q8_0_ref, 'q4_k': quant_q4_k_ref, 'q6_k': quant_q6_k_ref}[dtype](x, N, K)
    deq = {'q4_0': deq_q4_0, 'q8_0': deq_q8_0, 'q4_k': deq_q4_k, 'q6_k': deq_q6_k}[dtype](q.tobytes(), N, K)
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
    z = (rng.standard_normal(2 * 256) * 0.05).astype(F32)
    z[0:32] = 0  # an all-zero sub-block
    z[32:64] = np.abs(z[32:64])  # all positive: the min clips to 0
    z[256:512] *= np.linspace(0.01, 3, 256, dtype=F32)  # sub-blocks of very different scales
    quant_cases += [quant_case('q4_k 2x256', 'q4_k', 2, 256, z), quant_case('q6_k 2x256', 'q6_k', 2, 256, z)]
    with open(os.path.join(OUT, 'quantize.json'), 'w') as f:
        json.dump({'cases': quant_cases}, f, indent=0)
    print(f'wrote {len(deq_cases)} dequantize and {len(quant_cases)} quantize cases to {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
