// The table behind ClassifyGlobal. Started from the unsafe-globals lists public pickle scanners
// keep, extended with the attribute chains that reach the same targets; each row says what the
// name does, in trove's own classes.
#include "pickle/global_class.h"

#include <vector>

namespace trove {
namespace {

struct Row {
  std::string_view prefix;  // a module (everything in it) or module.name (it and its attributes)
  GlobalClass klass;
  // True when the name is unmistakable in the middle of a chain: `anything.os.system` is
  // os.system because a module's `os` attribute is the os module. Names a package could well
  // use for its own submodule ("code", "types", "io") match only at the start.
  // Rows are the names that act when called; data classes of the same modules (io.BytesIO,
  // types.SimpleNamespace, pathlib paths, copyreg._reconstructor) stay "unknown" (high).
  bool chain;
};

constexpr Row kRows[] = {
    // Commands and code.
    {"os", GlobalClass::kExec, true},
    {"posix", GlobalClass::kExec, true},
    {"nt", GlobalClass::kExec, true},
    {"subprocess", GlobalClass::kExec, true},
    {"_posixsubprocess", GlobalClass::kExec, true},
    {"commands", GlobalClass::kExec, true},
    {"popen2", GlobalClass::kExec, true},
    {"pty", GlobalClass::kExec, true},
    {"runpy", GlobalClass::kExec, true},
    {"multiprocessing", GlobalClass::kExec, true},
    {"threading", GlobalClass::kExec, true},
    {"_thread", GlobalClass::kExec, true},
    {"asyncio", GlobalClass::kExec, true},
    {"code", GlobalClass::kExec, false},
    {"codeop", GlobalClass::kExec, false},
    {"types.FunctionType", GlobalClass::kExec, false},  // a function from a code object
    {"types.LambdaType", GlobalClass::kExec, false},
    {"types.CodeType", GlobalClass::kExec, false},      // a code object from bytes
    {"types.MethodType", GlobalClass::kReflection, false},
    {"timeit", GlobalClass::kExec, true},
    {"pdb", GlobalClass::kExec, true},
    {"bdb", GlobalClass::kExec, true},
    {"trace", GlobalClass::kExec, false},
    {"profile", GlobalClass::kExec, false},
    {"cProfile", GlobalClass::kExec, true},
    {"doctest", GlobalClass::kExec, true},
    {"idlelib", GlobalClass::kExec, true},
    {"distutils", GlobalClass::kExec, true},
    {"setuptools", GlobalClass::kExec, true},
    {"pip", GlobalClass::kExec, true},
    {"platform.popen", GlobalClass::kExec, true},
    {"builtins.eval", GlobalClass::kExec, true},
    {"builtins.exec", GlobalClass::kExec, true},
    {"builtins.compile", GlobalClass::kExec, true},
    {"builtins.breakpoint", GlobalClass::kExec, true},
    {"builtins.input", GlobalClass::kExec, true},
    {"builtins.help", GlobalClass::kExec, true},
    {"builtins.exit", GlobalClass::kExec, true},
    {"builtins.quit", GlobalClass::kExec, true},
    {"numpy.testing._private.utils", GlobalClass::kExec, true},
    {"numpy.f2py", GlobalClass::kExec, true},
    {"numpy.distutils", GlobalClass::kExec, true},
    {"torch.utils.cpp_extension", GlobalClass::kExec, true},
    {"torch.utils.collect_env", GlobalClass::kExec, true},
    {"torch._dynamo", GlobalClass::kExec, true},
    {"torch.fx.graph_module._exec_with_source", GlobalClass::kExec, true},
    // Reflection: reach any name, call what is given.
    {"builtins", GlobalClass::kReflection, true},  // every other builtin (getattr, __import__, vars...)
    {"__builtin__", GlobalClass::kReflection, true},
    // Reflection whatever it is called with; a resolver that names enum classes reads the one
    // form getattr(EnumClass, 'MEMBER') as that member (DataResolver::EnumMember), never more.
    {"builtins.getattr", GlobalClass::kReflection, true},
    {"builtins.setattr", GlobalClass::kReflection, true},
    {"builtins.delattr", GlobalClass::kReflection, true},
    {"builtins.__import__", GlobalClass::kImport, true},
    {"builtins.globals", GlobalClass::kReflection, true},
    {"builtins.vars", GlobalClass::kReflection, true},
    {"operator", GlobalClass::kReflection, true},
    {"_operator", GlobalClass::kReflection, true},
    {"functools", GlobalClass::kReflection, true},
    {"_functools", GlobalClass::kReflection, true},
    // Imports: a module named by the file is imported, which runs its code.
    {"importlib", GlobalClass::kImport, true},
    {"imp", GlobalClass::kImport, false},
    {"pkgutil", GlobalClass::kImport, true},  // pkgutil.resolve_name imports any dotted name
    {"torch._utils._import_dotted_name", GlobalClass::kImport, true},
    {"pydoc", GlobalClass::kReflection, true},  // pydoc.locate imports any dotted name
    {"copyreg.add_extension", GlobalClass::kReflection, true},  // makes an EXT code name anything
    {"copyreg._inverted_registry", GlobalClass::kReflection, true},
    {"copyreg._extension_registry", GlobalClass::kReflection, true},
    {"sys", GlobalClass::kReflection, true},
    {"gc", GlobalClass::kReflection, false},
    {"inspect", GlobalClass::kReflection, false},
    {"ctypes", GlobalClass::kNativeCode, true},
    {"_ctypes", GlobalClass::kNativeCode, true},
    {"cffi", GlobalClass::kNativeCode, true},
    {"torch.ops.load_library", GlobalClass::kNativeCode, true},
    {"torch.classes.load_library", GlobalClass::kNativeCode, true},
    // Another pickle or checkpoint, run in turn.
    {"pickle", GlobalClass::kDeserialize, true},
    {"_pickle", GlobalClass::kDeserialize, true},
    {"cPickle", GlobalClass::kDeserialize, true},
    {"marshal", GlobalClass::kDeserialize, true},
    {"shelve", GlobalClass::kDeserialize, true},
    {"dill", GlobalClass::kDeserialize, true},
    {"cloudpickle", GlobalClass::kDeserialize, true},
    {"joblib", GlobalClass::kDeserialize, true},
    {"jsonpickle", GlobalClass::kDeserialize, true},
    {"yaml.load", GlobalClass::kDeserialize, true},
    {"yaml.unsafe_load", GlobalClass::kDeserialize, true},
    {"torch.load", GlobalClass::kDeserialize, true},
    {"torch.serialization.load", GlobalClass::kDeserialize, true},
    {"torch.serialization._load", GlobalClass::kDeserialize, true},
    {"torch.serialization._legacy_load", GlobalClass::kDeserialize, true},
    {"torch.jit.load", GlobalClass::kDeserialize, true},
    {"torch.jit._serialization.load", GlobalClass::kDeserialize, true},
    {"torch.hub", GlobalClass::kDeserialize, true},
    {"torch.package", GlobalClass::kDeserialize, true},
    {"torch.storage._load_from_bytes", GlobalClass::kDeserialize, true},
    {"numpy.load", GlobalClass::kDeserialize, true},
    {"numpy.lib.npyio", GlobalClass::kDeserialize, true},
    {"numpy.lib.format.read_array", GlobalClass::kDeserialize, true},
    {"pandas.read_pickle", GlobalClass::kDeserialize, true},
    // Files.
    {"builtins.open", GlobalClass::kFiles, true},
    {"io.open", GlobalClass::kFiles, false},
    {"io.open_code", GlobalClass::kFiles, false},
    {"io.FileIO", GlobalClass::kFiles, false},
    {"_io.open", GlobalClass::kFiles, true},
    {"_io.open_code", GlobalClass::kFiles, true},
    {"_io.FileIO", GlobalClass::kFiles, true},
    {"shutil", GlobalClass::kFiles, true},
    {"tempfile", GlobalClass::kFiles, true},
    {"fileinput", GlobalClass::kFiles, true},
    {"tarfile", GlobalClass::kFiles, true},
    {"zipfile", GlobalClass::kFiles, false},
    {"codecs.open", GlobalClass::kFiles, false},
    // Network and other programs.
    {"socket", GlobalClass::kNetwork, true},
    {"_socket", GlobalClass::kNetwork, true},
    {"ssl", GlobalClass::kNetwork, false},
    {"urllib", GlobalClass::kNetwork, true},
    {"urllib2", GlobalClass::kNetwork, true},
    {"http", GlobalClass::kNetwork, false},
    {"httplib", GlobalClass::kNetwork, true},
    {"requests", GlobalClass::kNetwork, true},
    {"aiohttp", GlobalClass::kNetwork, true},
    {"ftplib", GlobalClass::kNetwork, true},
    {"smtplib", GlobalClass::kNetwork, true},
    {"telnetlib", GlobalClass::kNetwork, true},
    {"xmlrpc", GlobalClass::kNetwork, true},
    {"paramiko", GlobalClass::kNetwork, true},
    {"webbrowser", GlobalClass::kNetwork, true},
};

bool Covers(std::string_view prefix, std::string_view dotted) {
  return dotted.starts_with(prefix) && (dotted.size() == prefix.size() || dotted[prefix.size()] == '.');
}

// The longest row covering `dotted` (most specific wins: builtins.open over builtins).
const Row* Match(std::string_view dotted, bool in_chain) {
  const Row* best = nullptr;
  for (const Row& r : kRows) {
    if (in_chain && !r.chain) continue;
    if (Covers(r.prefix, dotted) && (best == nullptr || r.prefix.size() > best->prefix.size())) best = &r;
  }
  return best;
}

}  // namespace

std::string_view GlobalClassName(GlobalClass c) {
  switch (c) {
    case GlobalClass::kExec: return "exec";
    case GlobalClass::kReflection: return "reflection";
    case GlobalClass::kImport: return "import";
    case GlobalClass::kDeserialize: return "deserialize";
    case GlobalClass::kFiles: return "files";
    case GlobalClass::kNetwork: return "network";
    case GlobalClass::kNativeCode: return "native-code";
    case GlobalClass::kUnknown: break;
  }
  return "unknown";
}

std::string_view GlobalClassEffect(GlobalClass c) {
  switch (c) {
    case GlobalClass::kExec: return "runs commands or code";
    case GlobalClass::kReflection: return "reaches or calls any other name";
    case GlobalClass::kImport: return "imports a module by name, running its code";
    case GlobalClass::kDeserialize: return "loads and runs another pickle or checkpoint";
    case GlobalClass::kFiles: return "opens, writes or removes files";
    case GlobalClass::kNetwork: return "opens connections or other programs";
    case GlobalClass::kNativeCode: return "loads or calls native code";
    case GlobalClass::kUnknown: break;
  }
  return "unknown to trove";
}

GlobalVerdict ClassifyGlobal(std::string_view dotted) {
  // Each '.' starts a possible chain: `a.b.os.system` is tried as itself, `b.os.system`, `os.system`.
  for (size_t start = 0; start < dotted.size();) {
    std::string_view tail = dotted.substr(start);
    if (const Row* r = Match(tail, start != 0)) {
      GlobalVerdict v{r->klass, std::string(r->prefix)};
      // Show the target as the name it resolves to within the row ("os.system", not "os").
      size_t next = tail.find('.', r->prefix.size() + 1);
      v.target = std::string(tail.substr(0, next));
      return v;
    }
    size_t dot = dotted.find('.', start);
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return {};
}

}  // namespace trove
