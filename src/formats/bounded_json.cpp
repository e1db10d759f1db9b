#include "formats/bounded_json.h"

#include <string>

#include "trove/error.h"

namespace trove {

nlohmann::json ParseBoundedJson(std::string_view text, int max_depth) {
  // The callback sees each object and array as it opens, at its depth (0: the outermost), and
  // stops the parse there: nothing deeper is ever built.
  const auto bound = [max_depth](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if ((event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start) &&
        depth >= max_depth) {
      Fail(ErrorCode::kLimit, "JSON nested deeper than " + std::to_string(max_depth) +
                                  (max_depth == 1 ? " level" : " levels") + ", more than this file holds");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, bound);
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorCode::kCorrupt, std::string("not valid JSON: ") + e.what());
  }
}

}  // namespace trove
