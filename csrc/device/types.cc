#include "csrc/device/types.h"

#include <c10/util/Exception.h>

namespace torch_tpu {

hlo::ElementType to_element_type(c10::ScalarType type) {
  using E = hlo::ElementType;
  switch (type) {
    case c10::ScalarType::Bool:
      return E::Pred;
    case c10::ScalarType::Byte:
      return E::U8;
    case c10::ScalarType::Char:
      return E::S8;
    case c10::ScalarType::Short:
      return E::S16;
    case c10::ScalarType::Int:
      return E::S32;
    case c10::ScalarType::Long:
      return E::S64;
    case c10::ScalarType::UInt16:
      return E::U16;
    case c10::ScalarType::UInt32:
      return E::U32;
    case c10::ScalarType::UInt64:
      return E::U64;
    case c10::ScalarType::Half:
      return E::F16;
    case c10::ScalarType::BFloat16:
      return E::BF16;
    case c10::ScalarType::Float:
      return E::F32;
    case c10::ScalarType::Double:
      return E::F64;
    case c10::ScalarType::ComplexFloat:
      return E::C64;
    case c10::ScalarType::ComplexDouble:
      return E::C128;
    case c10::ScalarType::ComplexHalf:
      return E::C32;
    case c10::ScalarType::Float8_e4m3fn:
      return E::F8E4M3FN;
    case c10::ScalarType::Float8_e5m2:
      return E::F8E5M2;
    case c10::ScalarType::Float8_e4m3fnuz:
      return E::F8E4M3FNUZ;
    case c10::ScalarType::Float8_e5m2fnuz:
      return E::F8E5M2FNUZ;
    default:
      TORCH_CHECK_TYPE(false, "torch_tpu: dtype ", type, " is not supported on the tpu device");
  }
}

c10::ScalarType to_scalar_type(hlo::ElementType type) {
  using E = hlo::ElementType;
  switch (type) {
    case E::Pred:
      return c10::ScalarType::Bool;
    case E::U8:
      return c10::ScalarType::Byte;
    case E::S8:
      return c10::ScalarType::Char;
    case E::S16:
      return c10::ScalarType::Short;
    case E::S32:
      return c10::ScalarType::Int;
    case E::S64:
      return c10::ScalarType::Long;
    case E::U16:
      return c10::ScalarType::UInt16;
    case E::U32:
      return c10::ScalarType::UInt32;
    case E::U64:
      return c10::ScalarType::UInt64;
    case E::F16:
      return c10::ScalarType::Half;
    case E::BF16:
      return c10::ScalarType::BFloat16;
    case E::F32:
      return c10::ScalarType::Float;
    case E::F64:
      return c10::ScalarType::Double;
    case E::C64:
      return c10::ScalarType::ComplexFloat;
    case E::C128:
      return c10::ScalarType::ComplexDouble;
    case E::C32:
      return c10::ScalarType::ComplexHalf;
    case E::F8E4M3FN:
      return c10::ScalarType::Float8_e4m3fn;
    case E::F8E5M2:
      return c10::ScalarType::Float8_e5m2;
    case E::F8E4M3FNUZ:
      return c10::ScalarType::Float8_e4m3fnuz;
    case E::F8E5M2FNUZ:
      return c10::ScalarType::Float8_e5m2fnuz;
  }
  return c10::ScalarType::Undefined;
}

PJRT_Buffer_Type to_pjrt_type(hlo::ElementType type) {
  using E = hlo::ElementType;
  switch (type) {
    case E::Pred:
      return PJRT_Buffer_Type_PRED;
    case E::S8:
      return PJRT_Buffer_Type_S8;
    case E::S16:
      return PJRT_Buffer_Type_S16;
    case E::S32:
      return PJRT_Buffer_Type_S32;
    case E::S64:
      return PJRT_Buffer_Type_S64;
    case E::U8:
      return PJRT_Buffer_Type_U8;
    case E::U16:
      return PJRT_Buffer_Type_U16;
    case E::U32:
      return PJRT_Buffer_Type_U32;
    case E::U64:
      return PJRT_Buffer_Type_U64;
    case E::F16:
      return PJRT_Buffer_Type_F16;
    case E::BF16:
      return PJRT_Buffer_Type_BF16;
    case E::F32:
      return PJRT_Buffer_Type_F32;
    case E::F64:
      return PJRT_Buffer_Type_F64;
    case E::C64:
      return PJRT_Buffer_Type_C64;
    case E::C128:
      return PJRT_Buffer_Type_C128;
    case E::C32:  // its two f16 parts, as 32 bits (see hlo::boundary_tensor_type)
      return PJRT_Buffer_Type_U32;
    case E::F8E4M3FN:
      return PJRT_Buffer_Type_F8E4M3FN;
    case E::F8E5M2:
      return PJRT_Buffer_Type_F8E5M2;
    case E::F8E4M3FNUZ:
      return PJRT_Buffer_Type_F8E4M3FNUZ;
    case E::F8E5M2FNUZ:
      return PJRT_Buffer_Type_F8E5M2FNUZ;
  }
  return PJRT_Buffer_Type_INVALID;
}

}  // namespace torch_tpu
