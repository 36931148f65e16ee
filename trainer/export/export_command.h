// `eft-train export`: a Hugging Face model directory as one GGUF file for llama.cpp (docs/models.md,
// "Export to GGUF"; gguf_export.h says what is carried and how).
//
//   eft-train export --model DIR --out FILE.gguf [--type f32|f16|bf16|q8_0]
//
// Prints a progress line on stderr while it works and one summary line on stdout at the end:
//   exported DIR to FILE.gguf: llama, 273 tensors, q8_0, 145.2 MB in 3.1 s
// Errors are one line on stderr ("eft-train: ..."), exit 2 for bad input (unknown architecture, a
// missing or malformed file, an unsupported tokenizer, bad flags), 1 for anything else (an unwritable
// output). main.cc constructs one ExportCommand on its CLI::App and, when selected(), returns Run(...).
#pragma once

#include <iosfwd>
#include <string>

#include <CLI/CLI.hpp>

namespace eft::trainer {

struct ExportArgs {
  std::string model, out, type = "f16";
  std::string name;  // general.name; empty: the directory's name
};

// Exit code.
int RunExport(const ExportArgs& args, std::ostream& out, std::ostream& err);

class ExportCommand {
 public:
  explicit ExportCommand(CLI::App& app);  // adds `export`
  ExportCommand(const ExportCommand&) = delete;  // CLI11 holds pointers into the args
  ExportCommand& operator=(const ExportCommand&) = delete;

  bool selected() const { return command_->parsed(); }
  int Run(std::ostream& out, std::ostream& err) const { return RunExport(args_, out, err); }

 private:
  ExportArgs args_;
  CLI::App* command_ = nullptr;
};

}  // namespace eft::trainer
