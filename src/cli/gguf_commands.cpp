// trove gguf set / del: a GGUF file's metadata edited by rewriting it to a temporary and renaming
// it over the file (trove/gguf.h; never in place).
#include <CLI/CLI.hpp>

#include <memory>

#include "cli/commands.h"
#include "cli/progress.h"
#include "trove/error.h"
#include "trove/gguf.h"

namespace trove::cli {

void AddGgufCommands(CLI::App& app, int* exit_code) {
  struct Args {
    std::string path, key, value, type;
    bool sync = false;
  };
  auto args = std::make_shared<Args>();
  auto* gguf = app.add_subcommand("gguf", "Edit a GGUF file's metadata (set, del)");
  gguf->require_subcommand(1);

  auto run = [exit_code, args](bool remove) {
    GgufMetadataEdit edit;
    edit.key = args->key;
    edit.remove = remove;
    edit.type = args->type;
    edit.value = args->value;
    WriteOptions options;
    options.durability = DurabilityFromSyncFlag(args->sync);
    Progress progress;
    options.progress = progress.Callback();
    EditGgufMetadata(args->path, {edit}, options);
    *exit_code = kExitOk;
  };

  auto* set = gguf->add_subcommand("set", "Set a metadata key (added when absent), rewriting the file");
  set->add_option("file", args->path, "GGUF file")->required();
  set->add_option("key", args->key, "Metadata key (tokenizer.chat_template, general.name...)")->required();
  set->add_option("value", args->value, "The value, as text")->required();
  set->add_option("--type", args->type, "string, bool, u8-u64, i8-i64, f32, f64 (default: the key's present type, else string)");
  set->add_flag("--sync", args->sync, kSyncFlagHelp);
  set->footer("The file is rewritten to a temporary beside it and renamed over it: a failure leaves it as it was.\n"
              "Examples:\n  trove gguf set model.gguf tokenizer.chat_template \"$(cat template.jinja)\"\n"
              "  trove gguf set model.gguf llama.context_length 8192");
  set->callback([run] { run(false); });

  auto* del = gguf->add_subcommand("del", "Delete a metadata key, rewriting the file");
  del->add_option("file", args->path, "GGUF file")->required();
  del->add_option("key", args->key, "Metadata key")->required();
  del->add_flag("--sync", args->sync, kSyncFlagHelp);
  del->footer("Example:\n  trove gguf del model.gguf tokenizer.chat_template");
  del->callback([run] { run(true); });
}

}  // namespace trove::cli
