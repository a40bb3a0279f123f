// Stand-in for re2/re2.h (see nlohmann/json.hpp beside it): pytorch_tokenizers' headers include
// it but use no RE2 type in what the runner compiles; the regex code is inside the library.
#pragma once

namespace re2 {
class RE2;
}  // namespace re2
