// trove pack / unpack / refresh-checksums: tensordict archive maintenance (issue 3).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/progress.h"
#include "core/display_escape.h"
#include "trove/error.h"
#include "trove/tensordict.h"
#include "trove/zip_reader.h"

namespace trove::cli {

void AddTensordictCommands(CLI::App& app, int* exit_code) {
  // Option storage shared by the callbacks, which the app owns: fresh for every app built
  // (statics would carry a previous parse's --compression into the next one).
  struct Args {
    std::string dir, archive, compression;
    bool sync = false;
  };
  auto args = std::make_shared<Args>();
  std::string& dir = args->dir;
  std::string& archive = args->archive;
  std::string& compression = args->compression;

  auto* pack = app.add_subcommand("pack", "Pack a tensordict directory into a .tdz archive");
  pack->add_option("dir", dir, "Tensordict directory (with meta.json)")->required();
  pack->add_option("archive", archive, "Archive to write (replaced atomically)")->required();
  pack->add_option("--compression", compression, "Compress .memmap leaves: deflate, bzip2 or lzma (default: stored, "
                                                  "64-byte aligned)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kZipMethodNames), std::end(kZipMethodNames))));
  pack->add_flag("--sync", args->sync, kSyncFlagHelp);
  pack->footer("Examples:\n  trove pack replay_buffer/ rb.tdz\n  trove pack replay_buffer/ rb.tdz --compression lzma");
  pack->callback([exit_code, args] {
    TensordictWriteOptions options;
    options.compression = ZipMethodFromName(args->compression);
    options.durability = DurabilityFromSyncFlag(args->sync);
    Progress progress;
    options.progress = progress.Callback();
    PackTdz(args->dir, args->archive, options);
    *exit_code = kExitOk;
  });

  auto* unpack = app.add_subcommand("unpack", "Extract a .tdz archive into a directory");
  unpack->add_option("archive", archive, ".tdz archive")->required();
  unpack->add_option("dir", dir, "Directory to create (an existing tensordict or empty one is replaced atomically)")
      ->required();
  unpack->add_flag("--sync", args->sync, kSyncFlagHelp);
  static bool allow_expand = false;
  unpack->add_flag("--allow-expand", allow_expand,
                   "Write compressed leaves inflating like a decompression bomb anyway (beyond kMaxInflateRatio)");
  unpack->footer("Example:\n  trove unpack rb.tdz replay_buffer/");
  unpack->callback([exit_code, args] {
    TensordictWriteOptions options;
    options.durability = DurabilityFromSyncFlag(args->sync);
    options.allow_expand = allow_expand;
    Progress progress;
    options.progress = progress.Callback();
    UnpackTdz(args->archive, args->dir, options);
    *exit_code = kExitOk;
  });

  auto* refresh = app.add_subcommand("refresh-checksums",
                                     "Rewrite the CRC-32s of a .tdz archive after in-place edits of its leaves");
  refresh->add_option("archive", archive, ".tdz archive (edited in place)")->required();
  refresh->footer("Prints each entry whose checksum was rewritten.");
  refresh->callback([exit_code, args] {
    for (const std::string& name : RefreshTdzChecksums(args->archive)) std::cout << "refreshed " << EscapeForDisplay(name) << '\n';
    *exit_code = kExitOk;
  });
}

}  // namespace trove::cli
