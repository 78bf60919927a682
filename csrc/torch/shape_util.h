// Engine-level joining of values along a dim, shared by cat, roll and the
// sorting ops.
#pragma once
#include <vector>

#include "engine/tensor/tensor.h"

namespace torch_tiny {

// `parts` (same dtype, same shape except along `dim`) joined along `dim`;
// undefined if all parts are empty along `dim`.
tiny::Tensor concat(std::vector<tiny::Tensor> parts, int dim);

}  // namespace torch_tiny
