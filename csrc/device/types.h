// The three spellings of an element type: torch's, the StableHLO builder's and PJRT's.
#pragma once

#include <c10/core/ScalarType.h>

#include "csrc/hlo/types.h"
#include "csrc/pjrt/c_api.h"

namespace torch_tpu {

// Throws c10::TypeError naming the dtype if the device has no such element type.
hlo::ElementType to_element_type(c10::ScalarType type);
c10::ScalarType to_scalar_type(hlo::ElementType type);
PJRT_Buffer_Type to_pjrt_type(hlo::ElementType type);

}  // namespace torch_tpu
