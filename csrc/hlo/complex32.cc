// complex32 (torch.chalf), which StableHLO has no element type for. A C32 value is computed as
// complex<f32>; at a function's boundary it is its 32 bits, two f16 parts with the real part in
// the low half (torch's layout on a little-endian host), so every op of a fused graph rounds its
// complex32 results to f16 parts, as torch's kernels do.
#include "csrc/hlo/builder.h"

namespace torch_tpu::hlo {

Value Builder::unpack_complex32(const Value& bits) {
  const Value halves = bitcast_convert(bits, ElementType::F16);  // shape + [2]
  std::vector<int64_t> start(halves.shape.size(), 0), limit = halves.shape;
  std::vector<int64_t> strides(halves.shape.size(), 1);
  limit.back() = 1;
  const Value re = reshape(slice(halves, start, limit, strides), bits.shape);
  start.back() = 1;
  limit.back() = 2;
  const Value im = reshape(slice(halves, start, limit, strides), bits.shape);
  return complex(re, im);
}

Value Builder::pack_complex32(const Value& z) {
  Shape pair_shape = z.shape;
  pair_shape.push_back(1);
  const Value re = reshape(real(z), pair_shape);
  const Value im = reshape(imag(z), pair_shape);
  return bitcast_convert(concatenate({re, im}, static_cast<int64_t>(z.shape.size())),
                         ElementType::U32);
}

Value Builder::round_to_complex32(const Value& z) {
  auto rounded = [&](const Value& part) {
    return convert(convert(part, ElementType::F16), ElementType::F32);
  };
  return retyped(complex(rounded(real(z)), rounded(imag(z))), ElementType::C32);
}

}  // namespace torch_tpu::hlo
