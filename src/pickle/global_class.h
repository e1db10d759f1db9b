// pickle/global_class.h: what a pickle global can do once Python resolves it.
//
// A pickle names a callable by text; Python imports the module and follows the name as an
// attribute chain, so `torch.serialization.os.system` or `numpy.os.system` is os.system. The
// classifier walks the chain the same way and reports the class of what the name resolves to,
// so a scan grades the target, not the spelling. The table is data (global_class.cpp): one row
// per module or name, with the class that a read policy ("dangerous" vs "unknown") can also use.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace trove {

enum class GlobalClass : uint8_t {
  kUnknown,      // not in the table: a class or function trove has no verdict on
  kExec,         // runs a command or Python code (os.system, subprocess, eval, runpy, pty.spawn...)
  kReflection,   // reaches any other name or calls what it is given (getattr, __import__,
                 // importlib, operator.attrgetter/methodcaller, functools.partial, copyreg...)
  kImport,       // imports a module by name, running its code (importlib, __import__,
                 // torch._utils._import_dotted_name...)
  kDeserialize,  // loads another pickle or checkpoint, running what it holds (pickle.loads, torch.load...)
  kFiles,        // opens, writes, moves or removes files (open, shutil, tempfile, tarfile...)
  kNetwork,      // opens connections or a browser (socket, urllib, http, webbrowser...)
  kNativeCode,   // loads or calls native code (ctypes, cffi, torch.ops.load_library)
};

// "exec", "reflection", "import", "deserialize", "files", "network", "native-code", "unknown".
std::string_view GlobalClassName(GlobalClass c);
// What running it means, for reports ("runs commands or code", ...).
std::string_view GlobalClassEffect(GlobalClass c);

struct GlobalVerdict {
  GlobalClass klass = GlobalClass::kUnknown;
  std::string target;  // the table row the name resolves to ("os.system" for "numpy.os.system")
};

// `dotted` is "module.name" as the pickle spells it (after Python 2 renames).
GlobalVerdict ClassifyGlobal(std::string_view dotted);

}  // namespace trove
