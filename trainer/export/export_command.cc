#include "trainer/export/export_command.h"

#include <chrono>
#include <cstdio>
#include <ostream>

#include "common/rank_protocol.h"
#include "trainer/export/gguf_export.h"

namespace eft::trainer {

int RunExport(const ExportArgs& args, std::ostream& out, std::ostream& err) {
  auto fail = [&](const Status& s) {
    err << "eft-train: " << s.message() << std::endl;
    return rank::ExitCodeFor(s);
  };
  auto type = ParseGgufFileType(args.type);
  if (!type.ok()) return fail(type.status());
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  // A progress line at most every 2 s: a 7B model takes minutes, a test fixture none.
  auto progress = [&](size_t done, size_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::seconds(2) || done == total) return;
    last = now;
    err << "eft-train export: " << done << "/" << total << " tensors" << std::endl;
  };
  auto summary = ExportGguf(args.model, args.out, *type, progress, args.name);
  if (!summary.ok()) return fail(summary.status());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char line[160];
  std::snprintf(line, sizeof line, "%s, %zu tensors, %s, %.1f MB in %.1f s", summary->architecture.c_str(),
                summary->tensors, GgufFileTypeName(*type), summary->bytes / 1e6, seconds);
  out << "exported " << args.model << " to " << args.out << ": " << line << std::endl;
  return 0;
}

ExportCommand::ExportCommand(CLI::App& app) {
  command_ = app.add_subcommand("export", "write a Hugging Face model directory as one GGUF file for llama.cpp "
                                          "(docs/models.md)");
  command_->add_option("--model", args_.model, "the model directory (config.json, safetensors, tokenizer.json)")
      ->required();
  command_->add_option("--out", args_.out, "the GGUF file to write (replaced atomically)")->required();
  command_->add_option("--type", args_.type,
                       "f32 | f16 | bf16 | q8_0: the matrices' type; norms and biases stay f32 (default f16)");
  command_->add_option("--name", args_.name,
                       "the model's name in the file (general.name, what llama.cpp's tools show; default: the "
                       "directory's name)");
}

}  // namespace eft::trainer
