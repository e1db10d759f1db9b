// The round trip: a torch.save checkpoint -> directory -> .tdz -> .pt, tensors byte for
// byte, checked by Debian's torch. Uses the .pt reader and writer of the pt area.
#include "formats/pt/pt_reader.h"
#include "formats/tensordict/tensordict_reader.h"
#include "td_fixtures.h"
#include "trove/pt_writer.h"

namespace trove::tdtest {
namespace {

class PtRoundTripTest : public TdTest {};

TEST_F(PtRoundTripTest, CheckpointToDirectoryToTdzToPt) {
  std::string out;
  ASSERT_EQ(Python("import torch\n"
                   "torch.manual_seed(0)\n"
                   "m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))\n"
                   "sd = m.state_dict()\n"
                   "sd['extra.t'] = torch.arange(12, dtype=torch.int16).reshape(3, 4).t()\n"
                   "sd['extra.b'] = torch.tensor([True, False])\n"
                   "sd['extra.h'] = torch.randn(5).to(torch.bfloat16)\n"
                   "torch.save(sd, '" + P("m.pt") + "')\n",
                   &out),
            0)
      << out;
  Document pt = ReadPt(MappedFile::Open(P("m.pt")), {});
  WriteTensordictDir(pt, P("dir"));
  Document dir = ReadTensordictDir(P("dir"), {});
  WriteTdz(dir, P("m.tdz"));
  Document tdz = ReadTdz(MappedFile::Open(P("m.tdz")), {});
  ASSERT_EQ(tdz.tensors.size(), pt.tensors.size());
  for (size_t i = 0; i < pt.tensors.size(); ++i) {
    EXPECT_EQ(tdz.tensors[i].key, pt.tensors[i].key);
    EXPECT_EQ(TensorBytes(*tdz.tensors[i].view), TensorBytes(*pt.tensors[i].view)) << pt.tensors[i].key;
  }
  WritePt(tdz, P("back.pt"), {});
  ASSERT_EQ(Python("import torch\n"
                   "a = torch.load('" + P("m.pt") + "')\n"
                   "b = torch.load('" + P("back.pt") + "')\n"
                   "assert list(a) == list(b), (list(a), list(b))\n"
                   "for k in a:\n"
                   "    assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k\n"
                   "    assert torch.equal(a[k], b[k]), k\n"
                   "print('ok')\n",
                   &out),
            0)
      << out;
}

}  // namespace
}  // namespace trove::tdtest
