#include "backends/qualcomm/runner/program_check.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "et_schema/program_generated.h"

namespace qnn_delegate {
namespace runner {

namespace {

namespace et = ::qnn_runner_et;

// Size of the flatbuffer at the start of a .pte: the extended header's program
// size when there is one ("eh00" at byte 8), else the whole file.
size_t flatbuffer_size(const std::vector<uint8_t>& head, size_t file_size) {
  if (head.size() < 24 || std::memcmp(head.data() + 8, "eh00", 4) != 0) return file_size;
  uint64_t program_size = 0;
  std::memcpy(&program_size, head.data() + 16, sizeof(program_size));  // little endian
  return program_size > 0 && program_size <= file_size ? static_cast<size_t>(program_size) : file_size;
}

bool read_prefix(const std::string& path, size_t nbytes, std::vector<uint8_t>& out) {
  std::ifstream f(path, std::ios::binary);
  out.resize(nbytes);
  return f && (nbytes == 0 || f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(nbytes)));
}

std::string where(const et::ExecutionPlan& plan, size_t delegate) {
  const std::string name = plan.name() != nullptr ? plan.name()->str() : std::string("?");
  return "execution plan '" + name + "' delegate " + std::to_string(delegate);
}

bool check_processed(const et::Program& program, const et::BackendDelegateDataReference& ref, std::string& why) {
  size_t count = 0;
  if (ref.location() == et::DataLocation::INLINE) {
    count = program.backend_delegate_data() != nullptr ? program.backend_delegate_data()->size() : 0;
    if (ref.index() < count && program.backend_delegate_data()->Get(ref.index())->data() == nullptr) {
      why = "has inline data without bytes";
      return false;
    }
  } else if (ref.location() == et::DataLocation::SEGMENT) {
    count = program.segments() != nullptr ? program.segments()->size() : 0;
  } else {
    why = "has an unknown data location " + std::to_string(static_cast<int>(ref.location()));
    return false;
  }
  if (ref.index() >= count) {
    why = "refers to data " + std::to_string(ref.index()) + " of " + std::to_string(count);
    return false;
  }
  return true;
}

bool check_delegate(const et::Program& program, const et::BackendDelegate& d, std::string& why) {
  if (d.id() == nullptr) {
    why = "has no backend id";
    return false;
  }
  if (d.processed() == nullptr) {
    why = "has no processed data reference";
    return false;
  }
  const flatbuffers::uoffset_t specs = d.compile_specs() != nullptr ? d.compile_specs()->size() : 0;
  for (flatbuffers::uoffset_t i = 0; i < specs; ++i) {  // no list at all is fine
    const et::CompileSpec* spec = d.compile_specs()->Get(i);
    if (spec == nullptr || spec->key() == nullptr || spec->value() == nullptr) {
      why = "has compile spec " + std::to_string(i) + " without a key or value";
      return false;
    }
  }
  return check_processed(program, *d.processed(), why);
}

}  // namespace

bool check_program_fields(const std::string& path, size_t file_size, std::string& why) {
  std::vector<uint8_t> data;
  if (!read_prefix(path, file_size < 24 ? file_size : 24, data)) {
    why = "cannot read the file";
    return false;
  }
  if (!read_prefix(path, flatbuffer_size(data, file_size), data)) {
    why = "cannot read the program flatbuffer";
    return false;
  }
  flatbuffers::Verifier verifier(data.data(), data.size());
  if (!et::VerifyProgramBuffer(verifier)) {
    why = "the program flatbuffer does not verify";
    return false;
  }
  const et::Program* program = et::GetProgram(data.data());
  if (program->execution_plan() == nullptr) {
    why = "the program has no execution plans";
    return false;
  }
  for (const et::ExecutionPlan* plan : *program->execution_plan()) {
    if (plan == nullptr || plan->delegates() == nullptr) continue;
    for (flatbuffers::uoffset_t i = 0; i < plan->delegates()->size(); ++i) {
      const et::BackendDelegate* d = plan->delegates()->Get(i);
      std::string reason;
      if (d == nullptr || !check_delegate(*program, *d, reason)) {
        why = where(*plan, i) + " " + (d == nullptr ? std::string("is missing") : reason);
        return false;
      }
    }
  }
  return true;
}

}  // namespace runner
}  // namespace qnn_delegate
