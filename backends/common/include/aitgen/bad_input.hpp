// The exception a kernel throws for bad input data (an out-of-range index): the container reports
// it as AIT_BAD_INPUT, which Python raises as RuntimeInputError, like a bad shape.
#ifndef AITGEN_BAD_INPUT_HPP_
#define AITGEN_BAD_INPUT_HPP_

#include <stdexcept>

namespace ait {
struct bad_input : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace ait

#endif  // AITGEN_BAD_INPUT_HPP_
