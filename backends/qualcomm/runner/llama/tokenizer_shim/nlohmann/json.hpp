// Stand-in for nlohmann/json.hpp, seen only by text_tokenizer.cpp through pytorch_tokenizers'
// hf_tokenizer.h. Those headers name nlohmann::json only in declarations of private members
// and of config parsers the runner never calls (the JSON parsing is compiled into the
// pytorch_tokenizers library); a declaration of the name is all they need, and the headers of
// the real library (which the executorch wheel does not ship) are not needed to build the runner.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nlohmann {
class json;
}  // namespace nlohmann
