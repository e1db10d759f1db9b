// The global classifier grades what a name resolves to: attribute chains reach their target,
// data classes of the same modules stay unknown.
#include <gtest/gtest.h>

#include "pickle/global_class.h"

namespace trove {
namespace {

TEST(GlobalClass, ChainsResolveToTheirTarget) {
  struct Case { const char* dotted; GlobalClass klass; const char* target; };
  const Case cases[] = {
      {"os.system", GlobalClass::kExec, "os.system"},
      {"posix.system", GlobalClass::kExec, "posix.system"},
      {"torch.serialization.os.system", GlobalClass::kExec, "os.system"},
      {"torch.serialization.os", GlobalClass::kExec, "os"},
      {"numpy.os.system", GlobalClass::kExec, "os.system"},
      {"os.path.os.system", GlobalClass::kExec, "os.path"},
      {"builtins.eval", GlobalClass::kExec, "builtins.eval"},
      {"builtins.getattr", GlobalClass::kReflection, "builtins.getattr"},
      {"builtins.open", GlobalClass::kFiles, "builtins.open"},
      {"operator.methodcaller", GlobalClass::kReflection, "operator.methodcaller"},
      {"functools.partial", GlobalClass::kReflection, "functools.partial"},
      {"torch.load", GlobalClass::kDeserialize, "torch.load"},
      {"torch.serialization.pickle.loads", GlobalClass::kDeserialize, "pickle.loads"},
      {"numpy.load", GlobalClass::kDeserialize, "numpy.load"},
      {"torch.hub.load", GlobalClass::kDeserialize, "torch.hub.load"},
      {"webbrowser.open", GlobalClass::kNetwork, "webbrowser.open"},
      {"ctypes.CDLL", GlobalClass::kNativeCode, "ctypes.CDLL"},
      {"copyreg.add_extension", GlobalClass::kReflection, "copyreg.add_extension"},
      // Imports run the imported module's code.
      {"torch._utils._import_dotted_name", GlobalClass::kImport, "torch._utils._import_dotted_name"},
      {"importlib.import_module", GlobalClass::kImport, "importlib.import_module"},
      {"builtins.__import__", GlobalClass::kImport, "builtins.__import__"},
      {"pkgutil.resolve_name", GlobalClass::kImport, "pkgutil.resolve_name"},
  };
  for (const auto& c : cases) {
    GlobalVerdict v = ClassifyGlobal(c.dotted);
    EXPECT_EQ(GlobalClassName(v.klass), GlobalClassName(c.klass)) << c.dotted;
    EXPECT_EQ(v.target, c.target) << c.dotted;
  }
}

TEST(GlobalClass, DataClassesAndLookalikesStayUnknown) {
  for (const char* dotted : {"collections.OrderedDict", "io.BytesIO", "types.SimpleNamespace", "pathlib.PosixPath",
                             "copyreg._reconstructor", "numpy.core.multiarray._reconstruct", "mypkg.code.Model",
                             "mypkg.types.Config", "osx.system", "torch.nn.modules.linear.Linear", "__main__.Net", "torch._utils._rebuild_tensor_v2",
                             "mypkg._utils._import_dotted_name"}) {
    EXPECT_EQ(ClassifyGlobal(dotted).klass, GlobalClass::kUnknown) << dotted;
  }
}

}  // namespace
}  // namespace trove
