// The conversion's one typed failure that is not the conversion's: the model itself failed on its inputs.
#pragma once

#include <c10/util/Exception.h>

namespace torch_mp::jit {

// The model itself failed on the example or calibration inputs (not the conversion): a c10::ValueError, raised in
// Python as torch_mp.ModelRunError (a ValueError).
class ModelRunError : public c10::ValueError {
 public:
  using c10::ValueError::ValueError;
};

} // namespace torch_mp::jit
