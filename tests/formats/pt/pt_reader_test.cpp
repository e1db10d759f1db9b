#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "trove/error.h"
#include "trove/open.h"

namespace trove {
namespace {

std::string Example() { return TROVE_SOURCE_DIR "/examples/tiny_model.pt"; }

TEST(PtReaderTest, ExampleCheckpointViewsTheMappedFile) {
  Document doc = Open(Example());
  EXPECT_EQ(doc.format, "pt");
  ASSERT_EQ(doc.tensors.size(), 18u);
  const NamedTensor* w = doc.FindTensor("model/embed.weight");
  const NamedTensor* head = doc.FindTensor("model/head.weight");
  ASSERT_TRUE(w && head);
  // Tied weights: one storage, the same bytes.
  EXPECT_EQ(w->view->storage_index, head->view->storage_index);
  EXPECT_EQ(w->view->first_element(), head->view->first_element());
  // Zero-copy: the bytes are inside the one mapping of the file, 64-byte aligned as torch wrote them.
  const uint8_t* p = w->view->first_element();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_TRUE(w->view->storage.SameOwner(head->view->storage));
  EXPECT_EQ(w->view->ContiguousLittleEndian().data(), p);  // contiguous: a view, not a copy
  EXPECT_EQ(Name(w->view->dtype), "float32");
  EXPECT_EQ(w->view->shape, (std::vector<int64_t>{32, 16}));
  const Value* epoch = doc.root->Find("epoch");
  ASSERT_TRUE(epoch);
  EXPECT_EQ(epoch->integer, 3);
  const Value* model = doc.root->Find("model");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->type_name, "collections.OrderedDict");
  ASSERT_TRUE(model->state);  // state_dict._metadata kept as the dict's attributes
  EXPECT_TRUE(model->state->Find("_metadata"));
}

TEST(PtReaderTest, ViewsOutliveTheDocument) {
  SharedBytes bytes;
  std::vector<uint8_t> expected;
  {
    Document doc = Open(Example());
    const TensorView& v = *doc.FindTensor("model/proj.bias")->view;
    bytes = v.ContiguousLittleEndian();
    expected.assign(bytes.data(), bytes.data() + bytes.size());
  }
  // The mapping stays alive while a view of it exists.
  EXPECT_EQ(std::vector<uint8_t>(bytes.data(), bytes.data() + bytes.size()), expected);
}

TEST(PtReaderTest, ErrorsNameTheFile) {
  std::string path = ::testing::TempDir() + "/not_a_checkpoint.pt";
  std::ofstream(path) << "hello";
  try {
    Open(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message().rfind(path + ": ", 0), 0u) << e.message();
    EXPECT_EQ(e.file(), path);
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
  try {
    Open(::testing::TempDir() + "/missing.pt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

}  // namespace
}  // namespace trove
