// Repacking into 16-row groups and back (the layouts are described in repack.h), and the scalar
// reference of the packed GEMM.
#include "kernels/repack.h"

#include <cstring>
#include <vector>

#include "kernels/blocks.h"

namespace coda {

namespace {

constexpr int64_t kQ4KHeader = kKQuantPackedNibbles;  // d, dmin, scales, min pairs
constexpr int64_t kQ4KGroupBytes = kq4k_packed_block_bytes(false);
constexpr int64_t kQ5KGroupBytes = kq4k_packed_block_bytes(true);  // then 8 chunks of qh
static_assert(kKQuantPackedHighBits == kQ4KHeader + kPackRows * kQKK / 2);
constexpr int64_t kQ6KHeader = 32 + 256;                      // d, scales
constexpr int64_t kQ6KLow = kQ6KHeader;                       // 32 chunks of ql bytes
constexpr int64_t kQ6KHigh = kQ6KLow + kPackRows * kQKK / 2;  // 16 chunks of qh bytes
constexpr int64_t kQ6KGroupBytes = kQ6KHigh + kPackRows * kQKK / 4;
static_assert(kQ6KGroupBytes == kPackRows * static_cast<int64_t>(sizeof(BlockQ6_K)));

// Inverse of kquant_scale_min: packs 8 six-bit scales and mins into the 12-byte field.
void kquant_pack_scales(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] & 63);
    s[j + 4] = static_cast<uint8_t>(m[j] & 63);
  }
  for (int j = 4; j < 8; ++j) {
    s[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
    s[j - 4] = static_cast<uint8_t>(s[j - 4] | ((sc[j] >> 4) << 6));
    s[j] = static_cast<uint8_t>(s[j] | ((m[j] >> 4) << 6));
  }
}

// Q4_K and Q5_K (repack.h): d, dmin, the unpacked scales and min pairs, 32 chunks of the quant
// bytes, and for Q5_K 8 chunks of the high bits (chunk p: qh bytes 4p..4p+3 of each row).
template <class Block>
void repack_kquant(const uint8_t* src, int64_t row_bytes, int64_t cols, uint8_t* dst) {
  constexpr bool kQ5 = sizeof(Block) == sizeof(BlockQ5_K);
  for (int64_t b = 0; b < cols / kQKK; ++b, dst += kQ5 ? kQ5KGroupBytes : kQ4KGroupBytes) {
    for (int r = 0; r < kPackRows; ++r) {
      const auto* blk = reinterpret_cast<const Block*>(src + r * row_bytes) + b;
      std::memcpy(dst + 2 * r, &blk->d, 2);
      std::memcpy(dst + 32 + 2 * r, &blk->dmin, 2);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc = 0, m = 0;
        kquant_scale_min(j, blk->scales, &sc, &m);
        dst[64 + j * 16 + r] = sc;
        dst[192 + (j / 2) * 32 + r * 2 + j % 2] = m;
      }
      for (int c = 0; c < 4; ++c)
        for (int p = 0; p < 8; ++p)
          std::memcpy(dst + kQ4KHeader + (c * 8 + p) * 64 + r * 4, blk->qs + 32 * c + 4 * p, 4);
      if constexpr (kQ5)
        for (int p = 0; p < 8; ++p) std::memcpy(dst + kKQuantPackedHighBits + p * 64 + r * 4, blk->qh + 4 * p, 4);
    }
  }
}

template <class Block>
void unpack_kquant(const uint8_t* g, int64_t cols, int r, uint8_t* dst) {
  constexpr bool kQ5 = sizeof(Block) == sizeof(BlockQ5_K);
  for (int64_t b = 0; b < cols / kQKK; ++b, g += kQ5 ? kQ5KGroupBytes : kQ4KGroupBytes) {
    auto* blk = reinterpret_cast<Block*>(dst) + b;
    std::memcpy(&blk->d, g + 2 * r, 2);
    std::memcpy(&blk->dmin, g + 32 + 2 * r, 2);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = g[64 + j * 16 + r];
      m[j] = g[192 + (j / 2) * 32 + r * 2 + j % 2];
    }
    kquant_pack_scales(sc, m, blk->scales);
    for (int c = 0; c < 4; ++c)
      for (int p = 0; p < 8; ++p) std::memcpy(blk->qs + 32 * c + 4 * p, g + kQ4KHeader + (c * 8 + p) * 64 + r * 4, 4);
    if constexpr (kQ5)
      for (int p = 0; p < 8; ++p) std::memcpy(blk->qh + 4 * p, g + kKQuantPackedHighBits + p * 64 + r * 4, 4);
  }
}

static_assert(kQ2KPackedBlockBytes == kPackRows * static_cast<int64_t>(sizeof(BlockQ2_K)));

// Copies n bytes from the original block into the packed group (pack) or back (unpack): the
// move_* functions below walk one list of offsets for both directions, so they cannot disagree.
struct Copy {
  bool pack;
  void operator()(uint8_t* packed, uint8_t* orig, size_t n) const {
    pack ? std::memcpy(packed, orig, n) : std::memcpy(orig, packed, n);
  }
};

// Q3_K and Q2_K (repack.h). `pack` true: original rows -> group; false: row r of the group back.
void move_q3_k(bool pack, uint8_t* g, uint8_t* row, int64_t cols, int r) {
  for (int64_t b = 0; b < cols / kQKK; ++b, g += kQ3KPackedBlockBytes) {
    auto* blk = reinterpret_cast<BlockQ3_K*>(row) + b;
    const Copy copy{pack};
    copy(g + 2 * r, reinterpret_cast<uint8_t*>(&blk->d), 2);
    if (pack) {
      int8_t sc[16];
      q3_k_scales16(blk->scales, sc);
      for (int s = 0; s < 16; ++s) g[32 + s * 16 + r] = static_cast<uint8_t>(sc[s]);
    } else {
      std::memset(blk->scales, 0, 12);
      for (int s = 0; s < 16; ++s) {
        const int v = static_cast<int8_t>(g[32 + s * 16 + r]) + 32;
        blk->scales[s % 8] = static_cast<uint8_t>(blk->scales[s % 8] | ((v & 0xF) << (4 * (s / 8))));
        blk->scales[8 + s % 4] = static_cast<uint8_t>(blk->scales[8 + s % 4] | ((v >> 4) << (2 * (s / 4))));
      }
    }
    for (int c = 0; c < 16; ++c) copy(g + kQ3KPackedQuants + c * 64 + r * 4, blk->qs + 4 * c, 4);
    for (int c = 0; c < 8; ++c) copy(g + kQ3KPackedHighBits + c * 64 + r * 4, blk->hmask + 4 * c, 4);
  }
}

void move_q2_k(bool pack, uint8_t* g, uint8_t* row, int64_t cols, int r) {
  for (int64_t b = 0; b < cols / kQKK; ++b, g += kQ2KPackedBlockBytes) {
    auto* blk = reinterpret_cast<BlockQ2_K*>(row) + b;
    const Copy copy{pack};
    copy(g + 2 * r, reinterpret_cast<uint8_t*>(&blk->d), 2);
    copy(g + 32 + 2 * r, reinterpret_cast<uint8_t*>(&blk->dmin), 2);
    for (int p = 0; p < 8; ++p) copy(g + kQ2KPackedScales + p * 32 + r * 2, blk->scales + 2 * p, 2);
    for (int c = 0; c < 16; ++c) copy(g + kQ2KPackedQuants + c * 64 + r * 4, blk->qs + 4 * c, 4);
  }
}

// Q5_0: qh bit j is the fifth bit of value j; the packed byte i of a row takes bits i, 4 + i, 8 + i
// and 12 + i as its bits 0..3 (values 4p + i) and bits 16 + i .. 28 + i as bits 4..7 (16 + 4p + i).
void move_q5_0(bool pack, uint8_t* g, uint8_t* row, int64_t cols, int r) {
  for (int64_t b = 0; b < cols / kQK; ++b, g += kQ50PackedBlockBytes) {
    auto* blk = reinterpret_cast<BlockQ5_0*>(row) + b;
    const Copy copy{pack};
    copy(g + 2 * r, reinterpret_cast<uint8_t*>(&blk->d), 2);
    for (int p = 0; p < 4; ++p) copy(g + 32 + p * 64 + r * 4, blk->qs + 4 * p, 4);
    uint8_t* h = g + kQ50PackedHighBits + r * 4;
    uint32_t qh = 0;
    if (pack) {
      std::memcpy(&qh, blk->qh, 4);
      for (int i = 0; i < 4; ++i) {
        h[i] = 0;
        for (int p = 0; p < 4; ++p)
          h[i] = static_cast<uint8_t>(h[i] | (((qh >> (4 * p + i)) & 1) << p) |
                                      (((qh >> (16 + 4 * p + i)) & 1) << (4 + p)));
      }
    } else {
      for (int i = 0; i < 4; ++i)
        for (int p = 0; p < 4; ++p)
          qh |= (static_cast<uint32_t>((h[i] >> p) & 1) << (4 * p + i)) |
                (static_cast<uint32_t>((h[i] >> (4 + p)) & 1) << (16 + 4 * p + i));
      std::memcpy(blk->qh, &qh, 4);
    }
  }
}

void move_iq4_xs(bool pack, uint8_t* g, uint8_t* row, int64_t cols, int r) {
  for (int64_t b = 0; b < cols / kQKK; ++b, g += kIQ4XSPackedBlockBytes) {
    auto* blk = reinterpret_cast<BlockIQ4_XS*>(row) + b;
    const Copy copy{pack};
    copy(g + 2 * r, reinterpret_cast<uint8_t*>(&blk->d), 2);
    if (pack) {
      for (int s = 0; s < 8; ++s) g[32 + s * 16 + r] = static_cast<uint8_t>(iq4_xs_scale(s, *blk) - 32);
    } else {
      blk->scales_h = 0;
      std::memset(blk->scales_l, 0, sizeof blk->scales_l);
      for (int s = 0; s < 8; ++s) {
        const int v = static_cast<int8_t>(g[32 + s * 16 + r]) + 32;
        blk->scales_l[s / 2] = static_cast<uint8_t>(blk->scales_l[s / 2] | ((v & 0xF) << (4 * (s % 2))));
        blk->scales_h = static_cast<uint16_t>(blk->scales_h | ((v >> 4) << (2 * s)));
      }
    }
    for (int c = 0; c < 32; ++c) copy(g + kIQ4XSPackedQuants + c * 64 + r * 4, blk->qs + 4 * c, 4);
  }
}

}  // namespace

bool repack_supported(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K ||
         t == DType::Q3_K || t == DType::Q2_K || t == DType::IQ4_XS || t == DType::Q5_0 || is_half_type(t);
}

int64_t packed_group_bytes(DType t, int64_t cols) {
  if (t == DType::Q4_K) return cols / kQKK * kQ4KGroupBytes;
  if (t == DType::Q5_K) return cols / kQKK * kQ5KGroupBytes;
  if (t == DType::Q3_K) return cols / kQKK * kQ3KPackedBlockBytes;
  if (t == DType::IQ4_XS) return cols / kQKK * kIQ4XSPackedBlockBytes;
  return kPackRows * dtype_row_bytes(t, cols);
}

ActFormat gemm_act_format(const KernelTable& k, DType t) {
  return t == DType::BF16 && k.gemm_bf16_rounds_activations ? ActFormat::BF16 : packed_act_format(t);
}

ActFormat packed_act_format(DType t) {
  if (is_half_type(t)) return ActFormat::F32;
  return act_format(t) == ActFormat::Q8_256 ? act_format(t) : ActFormat::Q8_32_BLOCKED;
}

void repack_group(DType t, const uint8_t* src, int64_t cols, uint8_t* dst) {
  const int64_t row_bytes = dtype_row_bytes(t, cols);
  if (is_half_type(t)) {
    // Column-major over the 16 rows: the writes run in order and the 16 source rows are streams.
    for (int64_t c = 0; c < cols; ++c)
      for (int r = 0; r < kPackRows; ++r) std::memcpy(dst + (c * kPackRows + r) * 2, src + r * row_bytes + c * 2, 2);
  } else if (t == DType::Q8_0) {
    for (int64_t b = 0; b < cols / kQK; ++b, dst += 32 + 16 * kQK) {
      for (int r = 0; r < kPackRows; ++r) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(src + r * row_bytes) + b;
        std::memcpy(dst + 2 * r, &blk->d, 2);
        for (int c = 0; c < 8; ++c)
          for (int i = 0; i < 4; ++i) dst[32 + c * 64 + r * 4 + i] = static_cast<uint8_t>(blk->qs[4 * c + i]) ^ 0x80;
      }
    }
  } else if (t == DType::Q4_0) {
    for (int64_t b = 0; b < cols / kQK; ++b, dst += 32 + 16 * kQK / 2) {
      for (int r = 0; r < kPackRows; ++r) {
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(src + r * row_bytes) + b;
        std::memcpy(dst + 2 * r, &blk->d, 2);
        for (int p = 0; p < 4; ++p) std::memcpy(dst + 32 + p * 64 + r * 4, blk->qs + 4 * p, 4);
      }
    }
  } else if (t == DType::Q4_K) {
    repack_kquant<BlockQ4_K>(src, row_bytes, cols, dst);
  } else if (t == DType::Q5_K) {
    repack_kquant<BlockQ5_K>(src, row_bytes, cols, dst);
  } else if (t == DType::Q3_K || t == DType::Q2_K || t == DType::IQ4_XS || t == DType::Q5_0) {
    const auto move = t == DType::Q3_K   ? move_q3_k
                      : t == DType::Q2_K ? move_q2_k
                      : t == DType::Q5_0 ? move_q5_0
                                         : move_iq4_xs;
    // Packing only reads the original rows (Copy{true} copies from them); the walk is shared with
    // unpack_row, which writes a row, hence the non-const parameter.
    for (int r = 0; r < kPackRows; ++r) move(true, dst, const_cast<uint8_t*>(src + r * row_bytes), cols, r);
  } else if (t == DType::Q6_K) {
    for (int64_t b = 0; b < cols / kQKK; ++b, dst += kQ6KGroupBytes) {
      for (int r = 0; r < kPackRows; ++r) {
        const auto* blk = reinterpret_cast<const BlockQ6_K*>(src + r * row_bytes) + b;
        std::memcpy(dst + 2 * r, &blk->d, 2);
        for (int j = 0; j < 16; ++j) dst[32 + j * 16 + r] = static_cast<uint8_t>(blk->scales[j]);
        for (int c = 0; c < 4; ++c)
          for (int p = 0; p < 8; ++p)
            std::memcpy(dst + kQ6KLow + (c * 8 + p) * 64 + r * 4, blk->ql + 32 * c + 4 * p, 4);
        for (int c = 0; c < 2; ++c)
          for (int p = 0; p < 8; ++p)
            std::memcpy(dst + kQ6KHigh + (c * 8 + p) * 64 + r * 4, blk->qh + 32 * c + 4 * p, 4);
      }
    }
  }
}

void unpack_row(DType t, const uint8_t* g, int64_t cols, int r, uint8_t* dst) {
  if (is_half_type(t)) {
    for (int64_t c = 0; c < cols; ++c) std::memcpy(dst + c * 2, g + (c * kPackRows + r) * 2, 2);
  } else if (t == DType::Q8_0) {
    for (int64_t b = 0; b < cols / kQK; ++b, g += 32 + 16 * kQK) {
      auto* blk = reinterpret_cast<BlockQ8_0*>(dst) + b;
      std::memcpy(&blk->d, g + 2 * r, 2);
      for (int c = 0; c < 8; ++c)
        for (int i = 0; i < 4; ++i) blk->qs[4 * c + i] = static_cast<int8_t>(g[32 + c * 64 + r * 4 + i] ^ 0x80);
    }
  } else if (t == DType::Q4_0) {
    for (int64_t b = 0; b < cols / kQK; ++b, g += 32 + 16 * kQK / 2) {
      auto* blk = reinterpret_cast<BlockQ4_0*>(dst) + b;
      std::memcpy(&blk->d, g + 2 * r, 2);
      for (int p = 0; p < 4; ++p) std::memcpy(blk->qs + 4 * p, g + 32 + p * 64 + r * 4, 4);
    }
  } else if (t == DType::Q4_K) {
    unpack_kquant<BlockQ4_K>(g, cols, r, dst);
  } else if (t == DType::Q5_K) {
    unpack_kquant<BlockQ5_K>(g, cols, r, dst);
  } else if (t == DType::Q3_K || t == DType::Q2_K || t == DType::IQ4_XS || t == DType::Q5_0) {
    const auto move = t == DType::Q3_K   ? move_q3_k
                      : t == DType::Q2_K ? move_q2_k
                      : t == DType::Q5_0 ? move_q5_0
                                         : move_iq4_xs;
    move(false, const_cast<uint8_t*>(g), dst, cols, r);
  } else if (t == DType::Q6_K) {
    for (int64_t b = 0; b < cols / kQKK; ++b, g += kQ6KGroupBytes) {
      auto* blk = reinterpret_cast<BlockQ6_K*>(dst) + b;
      std::memcpy(&blk->d, g + 2 * r, 2);
      for (int j = 0; j < 16; ++j) blk->scales[j] = static_cast<int8_t>(g[32 + j * 16 + r]);
      for (int c = 0; c < 4; ++c)
        for (int p = 0; p < 8; ++p) std::memcpy(blk->ql + 32 * c + 4 * p, g + kQ6KLow + (c * 8 + p) * 64 + r * 4, 4);
      for (int c = 0; c < 2; ++c)
        for (int p = 0; p < 8; ++p) std::memcpy(blk->qh + 32 * c + 4 * p, g + kQ6KHigh + (c * 8 + p) * 64 + r * 4, 4);
    }
  }
}

namespace ref {

void gemm_packed(DType t, const uint8_t* group, int64_t cols, const void* act, int64_t act_stride, int64_t n_tokens,
                 float* y, int64_t y_stride) {
  // ref::dot reads Q4_0 activations in the paired order of the unpacked kernels; packed Q4_0 takes
  // them in natural order, which is what ref::dot expects for Q8_0. Dequantizing to Q8_0 first is
  // exact (4-bit values times the same f16 scale), so the Q4_0 row is compared through Q8_0.
  std::vector<uint8_t> row(static_cast<size_t>(dtype_row_bytes(t, cols)));
  std::vector<uint8_t> as_q8(static_cast<size_t>(dtype_row_bytes(DType::Q8_0, cols)));
  // Blocked activations (Q8_0, Q4_0) back in ActRowQ8 form, the form ref::dot reads.
  const bool blocked = packed_act_format(t) == ActFormat::Q8_32_BLOCKED;
  const int64_t nb = cols / kQK;
  std::vector<uint8_t> rows;
  if (blocked) {
    rows.resize(static_cast<size_t>(n_tokens * act_row_bytes(ActFormat::Q8_32, cols)));
    for (int64_t b = 0; b < n_tokens; ++b) {
      const auto* src = reinterpret_cast<const ActBlockQ8*>(static_cast<const uint8_t*>(act) + b * act_stride);
      auto* q = reinterpret_cast<int8_t*>(rows.data() + b * act_row_bytes(ActFormat::Q8_32, cols));
      auto* d = reinterpret_cast<float*>(q + cols);
      auto* sum = reinterpret_cast<int32_t*>(d + nb);
      for (int64_t i = 0; i < nb; ++i) {
        std::memcpy(q + i * kQK, src[i].q, kQK);
        d[i] = src[i].d;
        sum[i] = src[i].sum;
      }
    }
    act = rows.data();
    act_stride = act_row_bytes(ActFormat::Q8_32, cols);
  }
  for (int r = 0; r < kPackRows; ++r) {
    unpack_row(t, group, cols, r, row.data());
    const uint8_t* w = row.data();
    DType wt = t;
    if (t == DType::Q4_0) {
      for (int64_t b = 0; b < cols / kQK; ++b) {
        const auto* src = reinterpret_cast<const BlockQ4_0*>(w) + b;
        auto* q8 = reinterpret_cast<BlockQ8_0*>(as_q8.data()) + b;
        q8->d = src->d;
        for (int j = 0; j < 16; ++j) {
          q8->qs[j] = static_cast<int8_t>((src->qs[j] & 0xF) - 8);
          q8->qs[j + 16] = static_cast<int8_t>((src->qs[j] >> 4) - 8);
        }
      }
      w = as_q8.data();
      wt = DType::Q8_0;
    }
    for (int64_t b = 0; b < n_tokens; ++b)
      y[b * y_stride + r] = dot(wt, w, static_cast<const uint8_t*>(act) + b * act_stride, cols);
  }
}

}  // namespace ref

}  // namespace coda
