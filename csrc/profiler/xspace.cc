#include "csrc/profiler/xspace.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "csrc/hlo/symbol.h"

namespace torch_tpu::profiler {
namespace {

// The protobuf wire format, as far as reading XSpace needs: fields of varints and of
// length-delimited bytes (fixed-width ones are skipped).
class Fields {
 public:
  explicit Fields(std::string_view data) : data_(data) {}

  // The next field, or false at the end or at anything malformed.
  bool next() {
    if (at_ >= data_.size()) return false;
    const uint64_t tag = varint();
    number_ = static_cast<uint32_t>(tag >> 3);
    switch (tag & 7u) {
      case 0:
        value_ = varint();
        bytes_ = {};
        break;
      case 2: {
        const uint64_t size = varint();
        if (size > data_.size() - at_) return false;
        bytes_ = data_.substr(at_, size);
        at_ += size;
        break;
      }
      case 1:
        at_ += 8;
        break;
      case 5:
        at_ += 4;
        break;
      default:
        return false;
    }
    return number_ != 0 && at_ <= data_.size();
  }

  uint32_t number() const { return number_; }
  size_t position() const { return at_; }
  uint64_t value() const { return value_; }
  std::string_view bytes() const { return bytes_; }

 private:
  uint64_t varint() {
    uint64_t result = 0;
    for (int shift = 0; at_ < data_.size() && shift < 64; shift += 7) {
      const auto byte = static_cast<uint8_t>(data_[at_++]);
      result |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80u) == 0) break;
    }
    return result;
  }

  std::string_view data_;
  size_t at_ = 0;
  uint32_t number_ = 0;
  uint64_t value_ = 0;
  std::string_view bytes_;
};

// XPlane.name "/device:TPU:3" (possibly followed by more) -> 3; -1 for a host plane.
int device_ordinal(std::string_view plane) {
  if (!plane.starts_with("/device:")) return -1;
  const size_t colon = plane.find(':', 8);
  if (colon == std::string_view::npos) return -1;
  int ordinal = -1;
  for (size_t i = colon + 1; i < plane.size() && plane[i] >= '0' && plane[i] <= '9'; ++i)
    ordinal = (ordinal < 0 ? 0 : ordinal * 10) + (plane[i] - '0');
  return ordinal;
}

// "aten_mm.default(12)" -> "aten_mm.default"
std::string program_of(std::string_view event_name) {
  const size_t paren = event_name.rfind('(');
  return std::string(paren == std::string_view::npos ? event_name : event_name.substr(0, paren));
}

void read_plane(std::string_view plane, std::vector<ProgramRun>& runs) {
  std::string_view name;
  std::vector<std::string_view> lines;
  std::unordered_map<uint64_t, std::string_view> event_names;  // event_metadata: id -> name
  for (Fields field(plane); field.next();) {
    if (field.number() == 2) name = field.bytes();
    if (field.number() == 3) lines.push_back(field.bytes());
    if (field.number() == 4) {  // a map entry: key 1, value 2 (XEventMetadata: name 2)
      uint64_t id = 0;
      std::string_view event_name;
      for (Fields entry(field.bytes()); entry.next();) {
        if (entry.number() == 1) id = entry.value();
        if (entry.number() != 2) continue;
        for (Fields metadata(entry.bytes()); metadata.next();)
          if (metadata.number() == 2) event_name = metadata.bytes();
      }
      event_names[id] = event_name;
    }
  }
  const int device = device_ordinal(name);
  if (device < 0) return;
  for (std::string_view line : lines) {
    std::string_view line_name;
    int64_t timestamp_ns = 0;
    std::vector<std::string_view> events;
    for (Fields field(line); field.next();) {
      if (field.number() == 2) line_name = field.bytes();
      if (field.number() == 3) timestamp_ns = static_cast<int64_t>(field.value());
      if (field.number() == 4) events.push_back(field.bytes());
    }
    if (line_name != "XLA Modules") continue;
    for (std::string_view event : events) {
      uint64_t metadata_id = 0, offset_ps = 0, duration_ps = 0;
      for (Fields field(event); field.next();) {
        if (field.number() == 1) metadata_id = field.value();
        if (field.number() == 2) offset_ps = field.value();
        if (field.number() == 3) duration_ps = field.value();
      }
      const int64_t start = timestamp_ns + static_cast<int64_t>(offset_ps / 1000);
      runs.push_back({program_of(event_names[metadata_id]), device, start,
                      start + static_cast<int64_t>(duration_ps / 1000)});
    }
  }
}

}  // namespace

std::string without_padding(std::string_view trace) {
  size_t end = 0;
  for (Fields field(trace); field.next();) end = field.position();
  return std::string(trace.substr(0, end));
}

std::vector<ProgramRun> program_runs(std::string_view xspace) {
  std::vector<ProgramRun> runs;
  for (Fields field(xspace); field.next();)
    if (field.number() == 1) read_plane(field.bytes(), runs);
  std::stable_sort(runs.begin(), runs.end(), [](const ProgramRun& a, const ProgramRun& b) {
    return a.device != b.device ? a.device < b.device : a.start_ns < b.start_ns;
  });
  return runs;
}

size_t use_device_times(std::vector<Span>& spans, const std::vector<ProgramRun>& runs) {
  std::map<int, std::vector<Span*>> launched;  // per device, in launch order
  for (Span& span : spans)
    if (span.on_device) launched[span.device].push_back(&span);
  std::map<int, std::vector<const ProgramRun*>> ran;
  for (const ProgramRun& run : runs) ran[run.device].push_back(&run);
  size_t timed = 0;
  for (auto& [device, device_spans] : launched) {
    std::stable_sort(device_spans.begin(), device_spans.end(), [](const Span* a, const Span* b) {
      return a->launch_start_ns < b->launch_start_ns;
    });
    const std::vector<const ProgramRun*>& device_runs = ran[device];
    if (device_runs.size() != device_spans.size()) continue;
    bool agree = true;
    for (size_t i = 0; i < device_spans.size() && agree; ++i)
      agree = !device_runs[i]->program.empty() &&
              hlo::module_symbol(device_spans[i]->name).starts_with(device_runs[i]->program);
    if (!agree) continue;
    for (size_t i = 0; i < device_spans.size(); ++i) {
      device_spans[i]->start_ns = device_runs[i]->start_ns;
      device_spans[i]->end_ns = device_runs[i]->end_ns;
    }
    timed += device_spans.size();
  }
  return timed;
}

}  // namespace torch_tpu::profiler
