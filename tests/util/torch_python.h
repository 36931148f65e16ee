// The Python whose PyTorch the tests' independent references run in: the one eft-train's LibTorch
// comes from (cmake/EftTorch.cmake: the project's .venv unless -DEFT_PYTHON says otherwise), so the
// reference and eft use the same PyTorch release. The build passes its path as EFT_TORCH_PYTHON.
#pragma once

#include <string>

namespace eft::testing {

inline std::string TorchPython() {
#ifdef EFT_TORCH_PYTHON
  return EFT_TORCH_PYTHON;
#else
  return "python3";
#endif
}

}  // namespace eft::testing
