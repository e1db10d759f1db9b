// GGUF metadata from a Hugging Face config.json beside a safetensors or .pt input (docs/gguf.md,
// "Writing GGUF"): the keys llama.cpp's loader needs for the llama family, as its converter names
// and types them.
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "formats/bounded_json.h"
#include "formats/gguf/gguf_format.h"
#include "trove/error.h"

namespace trove {
namespace {

// A config.json is a few kilobytes; the cap keeps a hostile one from being read whole into memory.
constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;
// A config.json nests a few objects (rope_scaling, text_config, quantization_config...): 32 levels
// is far beyond any model's.
constexpr int kMaxConfigDepth = 32;

// model_type -> general.architecture (llama.cpp converts Mistral's and Llama's checkpoints alike).
struct Family {
  const char* model_type;
  const char* architecture;
};
constexpr Family kFamilies[] = {{"llama", "llama"}, {"mistral", "llama"}, {"qwen2", "qwen2"}};

}  // namespace

std::vector<GgufMetadataEdit> GgufMetadataFromConfig(const std::string& path) {
  return WithFile(path, [&] {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) Fail(ErrorCode::kIo, "not a readable regular file");
    if (static_cast<uint64_t>(st.st_size) > kMaxConfigBytes) {
      Fail(ErrorCode::kLimit, std::to_string(st.st_size) + " bytes: a model's config.json is at most " + std::to_string(kMaxConfigBytes));
    }
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json config = ParseBoundedJson(text.str(), kMaxConfigDepth);
    if (!config.is_object()) Fail(ErrorCode::kCorrupt, "not a JSON object");
    const std::string model_type = config.contains("model_type") && config["model_type"].is_string() ? config["model_type"].get<std::string>() : "";
    const char* arch = nullptr;
    std::string known;
    for (const Family& f : kFamilies) {
      if (model_type == f.model_type) arch = f.architecture;
      known += (known.empty() ? "" : ", ") + std::string(f.model_type);
    }
    if (arch == nullptr) {
      Fail(ErrorCode::kUnsupported, "model_type '" + model_type + "' is not one whose GGUF metadata trove writes (" + known +
                                        "); --metadata general.architecture=NAME writes the file without config.json");
    }
    const std::string a = arch;
    std::vector<std::string> missing;
    auto number = [&](const char* name) -> const nlohmann::json* {
      if (!config.contains(name) || !config[name].is_number()) {
        missing.push_back(name);
        return nullptr;
      }
      return &config[name];
    };
    std::vector<GgufMetadataEdit> out;
    out.push_back({"general.architecture", false, "string", a});
    auto u32 = [&](const std::string& key, const char* name) {
      if (const nlohmann::json* v = number(name)) {
        if (!v->is_number_unsigned() || v->get<uint64_t>() > UINT32_MAX) Fail(ErrorCode::kCorrupt, std::string(name) + " is not a u32");
        out.push_back({key, false, "u32", std::to_string(v->get<uint64_t>())});
      }
    };
    u32(a + ".context_length", "max_position_embeddings");
    u32(a + ".embedding_length", "hidden_size");
    u32(a + ".block_count", "num_hidden_layers");
    u32(a + ".feed_forward_length", "intermediate_size");
    u32(a + ".attention.head_count", "num_attention_heads");
    // Grouped-query attention's KV heads; absent means as many as the attention heads.
    if (config.contains("num_key_value_heads")) u32(a + ".attention.head_count_kv", "num_key_value_heads");
    else u32(a + ".attention.head_count_kv", "num_attention_heads");
    u32(a + ".vocab_size", "vocab_size");
    if (const nlohmann::json* v = number("rms_norm_eps")) {
      out.push_back({a + ".attention.layer_norm_rms_epsilon", false, "f32", nlohmann::json(v->get<double>()).dump()});
    }
    // RoPE's base frequency: transformers' default (10000) when absent.
    const double theta = config.contains("rope_theta") && config["rope_theta"].is_number() ? config["rope_theta"].get<double>() : 10000.0;
    out.push_back({a + ".rope.freq_base", false, "f32", nlohmann::json(theta).dump()});
    if (config.contains("hidden_size") && config.contains("num_attention_heads") && config["hidden_size"].is_number_unsigned() &&
        config["num_attention_heads"].is_number_unsigned() && config["num_attention_heads"].get<uint64_t>() > 0) {
      const uint64_t head_dim = config.contains("head_dim") && config["head_dim"].is_number_unsigned()
                                    ? config["head_dim"].get<uint64_t>()
                                    : config["hidden_size"].get<uint64_t>() / config["num_attention_heads"].get<uint64_t>();
      if (head_dim <= UINT32_MAX) out.push_back({a + ".rope.dimension_count", false, "u32", std::to_string(head_dim)});
    }
    if (!missing.empty()) {
      std::string list;
      for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
      Fail(ErrorCode::kUnsupported, "config.json (model_type '" + model_type + "') lacks " + list +
                                        ", which GGUF's " + a + " metadata needs; nothing was written");
    }
    return out;
  });
}

}  // namespace trove
