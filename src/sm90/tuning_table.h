// The committed tuning table: which tile shape dispatch uses for a problem on
// an sm90 GPU. Keyed by (dtype, head dim, mask); entries were picked by
// measuring the compiled variants on an H100 (see bench/results/). A choice
// here may depend on the problem's own shape but never on the batch size
// or on the GPU's load, so results stay batch-invariant.
#pragma once

#include "flashcore/attention.h"

namespace flashcore::sm90 {

struct TileChoice {
  int block_m, block_n;
};

inline TileChoice tuned_tile(DType /*dtype*/, int head_dim, bool /*causal*/) {
  switch (head_dim) {
    case 256: return {128, 64};
    default: return {128, 128};
  }
}

}  // namespace flashcore::sm90
