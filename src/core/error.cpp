#include "trove/error.h"

#include "core/display_escape.h"

namespace trove {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUsage: return "usage";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kNotFound: return "not-found";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kRefused: return "refused";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kLimit: return "limit";
  }
  return "unknown";
}

namespace {

// The parts joined: an offset follows what precedes it with a space ("entry @ 57"), anything else
// with ": "; the spec code and the reason follow the last part with ": ". `display`: for a
// person (core/display_escape.h): the file and the entry are names, escaped whole; a context
// phrase and the reason are trove's text around names, escaped but for their backslashes.
std::string RenderParts(const std::vector<Error::Part>& parts, const std::optional<int>& spec_code,
                        const std::string& reason, bool display = false) {
  auto append = [display](std::string& m, const std::string& text, DisplayEscape how) {
    if (display) AppendEscapedForDisplay(text, m, how);
    else m += text;
  };
  std::string m;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Error::Part& p = parts[i];
    if (p.kind == Error::PartKind::kOffset) {
      if (i > 0) m += ' ';
      m.append("@ ").append(p.text);
    } else {
      if (i > 0) m += ": ";
      append(m, p.text, p.kind == Error::PartKind::kContext ? DisplayEscape::kLine : DisplayEscape::kName);
    }
  }
  if (!parts.empty()) m += ": ";
  if (spec_code) m.append("E").append(std::to_string(*spec_code)).append(": ");
  append(m, reason, DisplayEscape::kLine);
  return m;
}

}  // namespace

void Error::Render() { message_ = RenderParts(parts_, spec_code_, reason_); }

std::vector<std::string> Error::contexts() const {
  std::vector<std::string> out;
  for (const Part& p : parts_)
    if (p.kind == PartKind::kContext) out.push_back(p.text);
  return out;
}

std::string Error::MessageWithoutSpecCode() const { return RenderParts(parts_, std::nullopt, reason_); }

std::string Error::DisplayMessage() const { return RenderParts(parts_, spec_code_, reason_, true); }

std::string Error::DisplayMessageWithoutSpecCode() const { return RenderParts(parts_, std::nullopt, reason_, true); }

std::string Error::MessageWithout(bool file, bool entry, bool offset) const {
  std::vector<Part> kept;
  for (const Part& p : parts_) {
    if ((file && p.kind == PartKind::kFile) || (entry && p.kind == PartKind::kEntry) ||
        (offset && p.kind == PartKind::kOffset)) {
      continue;
    }
    kept.push_back(p);
  }
  return RenderParts(kept, spec_code_, reason_);
}

Error& Error::SetFile(std::string_view path) {
  if (file_.empty() && !path.empty()) {
    file_ = path;
    // Inner code that names a file as a context ("'ckpt/x.safetensors': No such file", because
    // the file the outer layer names is usually another: the index that listed it) would say the
    // path twice when the outer layer's file is that same one.
    const std::string quoted = "'" + file_ + "'";
    std::erase_if(parts_, [&](const Part& p) { return p.kind == PartKind::kContext && p.text == quoted; });
    parts_.insert(parts_.begin(), Part{PartKind::kFile, file_});
    Render();
  }
  return *this;
}

Error& Error::SetEntry(std::string_view entry) {
  if (entry_.empty() && !entry.empty()) {
    entry_ = entry;
    parts_.insert(parts_.begin(), Part{PartKind::kEntry, entry_});
    Render();
  }
  return *this;
}

Error& Error::SetOffset(uint64_t offset) {
  if (!offset_) {
    offset_ = offset;
    parts_.insert(parts_.begin(), Part{PartKind::kOffset, std::to_string(offset)});
    Render();
  }
  return *this;
}

Error& Error::NoteFile(std::string_view path) {
  if (file_.empty()) file_ = path;
  return *this;
}

Error& Error::SetSpecCode(int code) {
  spec_code_ = code;
  Render();
  return *this;
}

Error& Error::SetRefusedGlobal(std::string_view dotted) {
  refused_global_ = dotted;
  return *this;
}

Error& Error::AddContext(std::string_view context) {
  if (!context.empty()) {
    parts_.insert(parts_.begin(), Part{PartKind::kContext, std::string(context)});
    Render();
  }
  return *this;
}

void Fail(ErrorCode code, std::string message) { throw Error(code, std::move(message)); }

}  // namespace trove
