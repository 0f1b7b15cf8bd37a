"""Independent NumPy reader for GGUF files and dequantizer for coda's weight types.

Written from the GGUF format description, not from coda's C++: it shares no code with the engine.
Values are returned as float64 arrays shaped [rows, cols] (cols = GGUF ne[0], the contiguous dim).
"""
import struct

import numpy as np

VALUE_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

# type id -> (name, elements per block, bytes per block)
TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2), 8: ("Q8_0", 32, 34), 2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 20: ("IQ4_NL", 32, 18),
    23: ("IQ4_XS", 256, 136), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
}


class Reader:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", self.buf, 0)
        assert magic == b"GGUF" and version in (2, 3), "not a GGUF v2/v3 file"
        self.pos = 24
        self.kv = {}
        for _ in range(n_kv):
            key = self._string()
            (vtype,) = self._unpack("<I")
            self.kv[key] = self._value(vtype)
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            ne = list(self._unpack("<%dQ" % n_dims))
            ttype, offset = self._unpack("<IQ")
            self.tensors[name] = (ttype, ne, offset)
        align = self.kv.get("general.alignment", 32)
        self.data_start = (self.pos + align - 1) // align * align

    def _unpack(self, fmt):
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals

    def _string(self):
        (n,) = self._unpack("<Q")
        s = self.buf[self.pos:self.pos + n].decode("utf-8", errors="surrogateescape")
        self.pos += n
        return s

    def _value(self, vtype):
        if vtype == 8:
            return self._string()
        if vtype == 9:
            etype, count = self._unpack("<IQ")
            return [self._value(etype) for _ in range(count)]
        return self._unpack(VALUE_FORMATS[vtype])[0]

    def tensor(self, name):
        """Dequantized tensor as float64 [rows, cols] (1-D tensors: [cols])."""
        ttype, ne, offset = self.tensors[name]
        n = int(np.prod(ne))
        _, block, block_bytes = TYPES[ttype]
        start = self.data_start + offset
        raw = np.frombuffer(self.buf, dtype=np.uint8, count=n // block * block_bytes, offset=start)
        x = dequantize(ttype, raw, n)
        return x.reshape(list(reversed(ne))) if len(ne) > 1 else x


# The 16 levels of IQ4_NL and IQ4_XS (a fact of the format).
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float64)


def _f16(a):
    return a.view("<f2").astype(np.float64)


def _scale_min_k4(s):
    """s: [nb, 12] uint8 -> (sc, m) each [nb, 8] as float64 (6-bit values)."""
    s = s.astype(np.int64)
    sc = np.empty((s.shape[0], 8), np.int64)
    m = np.empty((s.shape[0], 8), np.int64)
    sc[:, :4] = s[:, 0:4] & 63
    m[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc.astype(np.float64), m.astype(np.float64)


def dequantize(ttype, raw, n):
    if ttype == 0:
        return raw.view("<f4").astype(np.float64)
    if ttype == 1:
        return raw.view("<f2").astype(np.float64)
    if ttype == 30:
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if ttype == 8:  # Q8_0
        b = raw.reshape(-1, 34)
        d = _f16(b[:, 0:2].copy())
        q = b[:, 2:].view(np.int8).astype(np.float64)
        return (d[:, :1] * q).reshape(-1)
    if ttype == 2:  # Q4_0
        b = raw.reshape(-1, 18)
        d = _f16(b[:, 0:2].copy())
        qs = b[:, 2:].astype(np.int64)
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1) - 8
        return (d[:, :1] * q).reshape(-1)
    if ttype in (12, 13):  # Q4_K, Q5_K
        size = 144 if ttype == 12 else 176
        b = raw.reshape(-1, size)
        d = _f16(b[:, 0:2].copy())[:, 0]
        dmin = _f16(b[:, 2:4].copy())[:, 0]
        sc, m = _scale_min_k4(b[:, 4:16])
        if ttype == 12:
            qs = b[:, 16:144].astype(np.int64).reshape(-1, 4, 32)
            qh = None
        else:
            qh = b[:, 16:48].astype(np.int64)
            qs = b[:, 48:176].astype(np.int64).reshape(-1, 4, 32)
        out = np.empty((b.shape[0], 8, 32), np.float64)
        for c in range(4):
            lo = qs[:, c, :] & 0xF
            hi = qs[:, c, :] >> 4
            if qh is not None:
                lo = lo + 16 * ((qh >> (2 * c)) & 1)
                hi = hi + 16 * ((qh >> (2 * c + 1)) & 1)
            out[:, 2 * c, :] = (d * sc[:, 2 * c])[:, None] * lo - (dmin * m[:, 2 * c])[:, None]
            out[:, 2 * c + 1, :] = (d * sc[:, 2 * c + 1])[:, None] * hi - (dmin * m[:, 2 * c + 1])[:, None]
        return out.reshape(-1)
    if ttype == 14:  # Q6_K
        b = raw.reshape(-1, 210)
        ql = b[:, 0:128].astype(np.int64)
        qh = b[:, 128:192].astype(np.int64)
        sc = b[:, 192:208].view(np.int8).astype(np.float64)
        d = _f16(b[:, 208:210].copy())[:, 0]
        out = np.empty((b.shape[0], 256), np.float64)
        for half in range(2):
            l = ql[:, 64 * half:64 * half + 64]
            h = qh[:, 32 * half:32 * half + 32]
            q = [
                (l[:, :32] & 0xF) | ((h & 3) << 4),
                (l[:, 32:] & 0xF) | (((h >> 2) & 3) << 4),
                (l[:, :32] >> 4) | (((h >> 4) & 3) << 4),
                (l[:, 32:] >> 4) | (((h >> 6) & 3) << 4),
            ]
            for k in range(4):
                vals = (q[k] - 32).astype(np.float64)
                base = 128 * half + 32 * k
                scale = np.repeat(sc[:, base // 16:base // 16 + 2], 16, axis=1)
                out[:, base:base + 32] = d[:, None] * scale * vals
        return out.reshape(-1)
    if ttype in (10, 11):  # Q2_K, Q3_K: per element e, its byte, bit pair and sub-block as index arrays
        e = np.arange(256)
        half, j, l = e // 128, (e % 128) // 32, e % 32
        sub = 8 * half + 2 * j + l // 16
        if ttype == 11:
            b = raw.reshape(-1, 110)
            hmask, qs, sc_raw = b[:, 0:32].astype(np.int64), b[:, 32:96].astype(np.int64), b[:, 96:108].astype(np.int64)
            d = _f16(b[:, 108:110].copy())[:, 0]
            s = np.arange(16)
            low4 = (sc_raw[:, s % 8] >> (4 * (s // 8))) & 0xF
            high2 = (sc_raw[:, 8 + s % 4] >> (2 * (s // 4))) & 3
            scale = ((low4 | (high2 << 4)) - 32).astype(np.float64)
            q = ((qs[:, 32 * half + l] >> (2 * j)) & 3) - 4 * (1 - ((hmask[:, l] >> (4 * half + j)) & 1))
            return (d[:, None] * scale[:, sub] * q).reshape(-1)
        b = raw.reshape(-1, 84)
        sc_raw, qs = b[:, 0:16].astype(np.int64), b[:, 16:80].astype(np.int64)
        d = _f16(b[:, 80:82].copy())[:, 0]
        dmin = _f16(b[:, 82:84].copy())[:, 0]
        q = (qs[:, 32 * half + l] >> (2 * j)) & 3
        return (d[:, None] * (sc_raw[:, sub] & 0xF) * q - dmin[:, None] * (sc_raw[:, sub] >> 4)).reshape(-1)
    if ttype in (3, 6, 7):  # Q4_1, Q5_0, Q5_1: nibbles as Q4_0's, fifth bit j of element j in qh
        size = {3: 20, 6: 22, 7: 24}[ttype]
        b = raw.reshape(-1, size)
        d = _f16(b[:, 0:2].copy())
        m = _f16(b[:, 2:4].copy()) if ttype != 6 else None
        start = 2 if ttype == 6 else 4
        qs = b[:, size - 16:].astype(np.int64)
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1)
        if ttype != 3:
            qh = b[:, start:start + 4].copy().view("<u4").astype(np.int64)  # [nb, 1]
            q = q | (((qh >> np.arange(32)) & 1) << 4)
        if ttype == 6:
            return (d * (q - 16)).reshape(-1)
        return (d * q + m).reshape(-1)
    if ttype == 20:  # IQ4_NL: indices into IQ4_LEVELS, byte j = elements j (low) and j + 16 (high)
        b = raw.reshape(-1, 18)
        d = _f16(b[:, 0:2].copy())
        qs = b[:, 2:].astype(np.int64)
        idx = np.concatenate([qs & 0xF, qs >> 4], axis=1)
        return (d[:, :1] * IQ4_LEVELS[idx]).reshape(-1)
    if ttype == 23:  # IQ4_XS: 8 IQ4_NL-like sub-blocks with 6-bit scales biased by 32
        b = raw.reshape(-1, 136)
        d = _f16(b[:, 0:2].copy())[:, 0]
        sh = b[:, 2:4].copy().view("<u2")[:, 0].astype(np.int64)
        sl = b[:, 4:8].astype(np.int64)
        qs = b[:, 8:136].astype(np.int64).reshape(-1, 8, 16)
        s = np.arange(8)
        ls = ((sl[:, s // 2] >> (4 * (s % 2))) & 0xF) | (((sh[:, None] >> (2 * s)) & 3) << 4)
        idx = np.concatenate([qs & 0xF, qs >> 4], axis=2)  # [nb, 8, 32]
        return (d[:, None, None] * (ls - 32)[:, :, None] * IQ4_LEVELS[idx]).reshape(-1)
    raise ValueError("unsupported tensor type %d" % ttype)
