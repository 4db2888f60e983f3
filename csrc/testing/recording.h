// What the test provider's recording operators share (recording_operators.cc,
// dynamic_recorder.cc): the log line describing a first phase's arguments,
// each as Describe(argument) prints it, and the executor made with it.
#ifndef JAX_ACLNN_TESTING_RECORDING_H_
#define JAX_ACLNN_TESTING_RECORDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "testing/test_provider.h"

namespace jax_aclnn::test_provider {

std::string Describe(bool v);
std::string Describe(int8_t v);
std::string Describe(int32_t v);
std::string Describe(int64_t v);
std::string Describe(double v);
std::string Describe(float v);
std::string Describe(const char* s);
std::string Describe(const aclTensor* t);
std::string Describe(const aclScalar* s);
std::string Describe(const aclIntArray* a);
std::string Describe(const aclBoolArray* a);
std::string Describe(const aclFloatArray* a);
std::string Describe(const aclTensorList* l);

// Describes a first phase's arguments and collects its tensor parameters
// (const: inputs, else outputs; a list's tensors in a row).
struct Recorder {
  std::string line;
  std::vector<Slot> inputs, outputs;

  void Add(const std::string& text) { line += (line.empty() ? "" : "; ") + text; }
  template <typename T>
  void Arg(T value) { Add(Describe(value)); }
  void Arg(const aclTensor* t) { inputs.push_back(SlotOf(t)); Add(Describe(t)); }
  void Arg(aclTensor* t) { outputs.push_back(SlotOf(t)); Add(Describe(t)); }
  void Arg(const aclTensorList* l) { AddList(l, &inputs); }
  void Arg(aclTensorList* l) { AddList(l, &outputs); }
  void AddList(const aclTensorList* l, std::vector<Slot>* slots) {
    if (l != nullptr)
      for (const auto& t : l->tensors) slots->push_back(SlotOf(t.get()));
    Add(Describe(l));
  }
};

// Appends `recorded`'s line to the log (jaxAclnnTestRecorded) and makes the
// first phase's executor, whose second phase runs `kernel` on its tensors.
aclnnStatus MakeRecordingExecutor(const char* op, Recorder recorded, Kernel kernel,
                                  uint64_t* workspace_size, aclOpExecutor** executor);

}  // namespace jax_aclnn::test_provider

#endif  // JAX_ACLNN_TESTING_RECORDING_H_
