#include "trainer/data/jsonl_line.h"

#include "common/utf8.h"

namespace eft::trainer {
namespace {

Status CheckUtf8(std::string_view line) {
  for (size_t i = 0; i < line.size();) {
    if (static_cast<unsigned char>(line[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = Utf8SequenceLength(line, i);
    if (len == 0) return Status::InvalidArgument("invalid UTF-8 at byte " + std::to_string(i));
    i += len;
  }
  return Status::Ok();
}

// Brackets outside strings; the parser reports any imbalance itself.
Status CheckDepth(std::string_view line) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonlDepth) {
        return Status::InvalidArgument("values nested more than " + std::to_string(kMaxJsonlDepth) +
                                       " levels deep (at byte " + std::to_string(i) + ")");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::Ok();
}

}  // namespace

bool ReadBoundedLine(std::istream& in, std::string* line, bool* too_long, size_t max_bytes) {
  line->clear();
  *too_long = false;
  char buf[64 * 1024];
  bool any = false;
  auto keep = [&](const char* p, size_t n) {
    if (*too_long) return;
    if (line->size() + n > max_bytes) {
      *too_long = true;
      line->append(p, max_bytes - line->size());
      return;
    }
    line->append(p, n);
  };
  while (true) {
    in.getline(buf, sizeof(buf));
    const size_t got = static_cast<size_t>(in.gcount());
    if (in.bad()) return false;
    if (in.eof()) {  // the last line, without a '\n'
      keep(buf, got);
      return any || got > 0;
    }
    if (in.fail()) {  // the buffer filled before a '\n': more of the same line follows
      keep(buf, got);
      any = true;
      in.clear();
      continue;
    }
    keep(buf, got - 1);  // gcount counts the '\n', which is not stored
    return true;
  }
}

Status LineTooLong(size_t max_bytes) {
  return Status::InvalidArgument("line is longer than " + std::to_string(max_bytes >> 20) +
                                 " MiB, the limit for one example (is the file JSONL?)");
}

Status CheckJsonlLine(std::string_view line) {
  EFT_RETURN_IF_ERROR(CheckUtf8(line));
  return CheckDepth(line);
}

}  // namespace eft::trainer
