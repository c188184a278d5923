#include "csrc/profiler/xspace.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

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

// A map<int64, message> entry of an XPlane: its key and the message's field `name_field`.
std::pair<uint64_t, std::string_view> named_entry(std::string_view entry_bytes) {
  uint64_t id = 0;
  std::string_view name;
  for (Fields entry(entry_bytes); entry.next();) {
    if (entry.number() == 1) id = entry.value();
    if (entry.number() != 2) continue;
    for (Fields metadata(entry.bytes()); metadata.next();)
      if (metadata.number() == 2) name = metadata.bytes();
  }
  return {id, name};
}

struct Plane {
  std::string_view name;
  std::vector<std::string_view> lines;
  std::unordered_map<uint64_t, std::string_view> event_names;  // event_metadata: id -> name
  std::unordered_map<uint64_t, std::string_view> stat_names;   // stat_metadata: id -> name
};

Plane parse_plane(std::string_view bytes) {
  Plane plane;
  for (Fields field(bytes); field.next();) {
    if (field.number() == 2) plane.name = field.bytes();
    if (field.number() == 3) plane.lines.push_back(field.bytes());
    if (field.number() == 4) plane.event_names.insert(named_entry(field.bytes()));
    if (field.number() == 5) plane.stat_names.insert(named_entry(field.bytes()));
  }
  return plane;
}

// The module an event's stats name (XLA's kernel annotation "XlaModule:#hlo_module=M,...#"
// becomes the stat hlo_module: a string, or a reference to a stat metadata's name).
std::string_view module_stat(const Plane& plane, std::string_view event) {
  for (Fields field(event); field.next();) {
    if (field.number() != 4) continue;
    uint64_t metadata_id = 0;
    std::string_view text;
    std::optional<uint64_t> reference;
    for (Fields stat(field.bytes()); stat.next();) {
      if (stat.number() == 1) metadata_id = stat.value();
      if (stat.number() == 5) text = stat.bytes();
      if (stat.number() == 7) reference = stat.value();
    }
    auto name = plane.stat_names.find(metadata_id);
    if (name == plane.stat_names.end() || name->second != "hlo_module") continue;
    if (reference) {
      auto referenced = plane.stat_names.find(*reference);
      return referenced == plane.stat_names.end() ? std::string_view() : referenced->second;
    }
    return text;
  }
  return {};
}

void read_plane(std::string_view bytes, std::vector<ProgramRun>& events) {
  const Plane plane = parse_plane(bytes);
  const int device = device_ordinal(plane.name);
  if (device < 0) return;
  struct Line {
    std::string_view name;
    int64_t timestamp_ns = 0;
    std::vector<std::string_view> events;
  };
  std::vector<Line> lines;
  for (std::string_view line_bytes : plane.lines) {
    Line& line = lines.emplace_back();
    for (Fields field(line_bytes); field.next();) {
      if (field.number() == 2) line.name = field.bytes();
      if (field.number() == 3) line.timestamp_ns = static_cast<int64_t>(field.value());
      if (field.number() == 4) line.events.push_back(field.bytes());
    }
  }
  // libtpu's module line has one event per run; the op lines beside it repeat the same time.
  const bool has_module_line = std::any_of(lines.begin(), lines.end(),
                                           [](const Line& l) { return l.name == "XLA Modules"; });
  for (const Line& line : lines) {
    if (has_module_line && line.name != "XLA Modules") continue;
    for (std::string_view event : line.events) {
      uint64_t metadata_id = 0, offset_ps = 0, duration_ps = 0;
      for (Fields field(event); field.next();) {
        if (field.number() == 1) metadata_id = field.value();
        if (field.number() == 2) offset_ps = field.value();
        if (field.number() == 3) duration_ps = field.value();
      }
      const int64_t start = line.timestamp_ns + static_cast<int64_t>(offset_ps / 1000);
      ProgramRun run{.device = device,
                     .start_ns = start,
                     .end_ns = start + static_cast<int64_t>(duration_ps / 1000),
                     .module_event = has_module_line};
      if (has_module_line) {
        auto name = plane.event_names.find(metadata_id);
        if (name != plane.event_names.end()) run.program = program_of(name->second);
      } else {
        run.program = std::string(module_stat(plane, event));
      }
      events.push_back(std::move(run));
    }
  }
}

// Gives `span` the union of `events` as its device time.
void take_events(Span& span, const ProgramRun* const* events, size_t count, Span::Timing timing) {
  span.start_ns = events[0]->start_ns;
  span.end_ns = events[0]->end_ns;
  for (size_t i = 1; i < count; ++i) {
    span.start_ns = std::min(span.start_ns, events[i]->start_ns);
    span.end_ns = std::max(span.end_ns, events[i]->end_ns);
  }
  span.timing = timing;
}

// Runs of consecutive spans of one program take the next stretch of events of that program
// (skipping stretches of programs no span ran), split evenly among them. Returns spans timed.
size_t match_by_program(const std::vector<Span*>& spans,
                        const std::vector<const ProgramRun*>& events) {
  struct Stretch {
    std::string_view program;
    std::vector<const ProgramRun*> events;
  };
  std::vector<Stretch> stretches;
  for (const ProgramRun* event : events) {
    if (event->program.empty()) continue;
    if (stretches.empty() || stretches.back().program != event->program)
      stretches.push_back({event->program, {}});
    stretches.back().events.push_back(event);
  }
  size_t timed = 0, next = 0;
  for (size_t first = 0; first < spans.size();) {
    const std::string symbol = hlo::module_symbol(spans[first]->name);
    size_t last = first + 1;
    while (last < spans.size() && hlo::module_symbol(spans[last]->name) == symbol) ++last;
    const size_t count = last - first;
    size_t found = next;
    while (found < stretches.size() && !symbol.starts_with(stretches[found].program)) ++found;
    if (found < stretches.size()) {
      const std::vector<const ProgramRun*>& stretch = stretches[found].events;
      next = found + 1;
      if (stretch.size() % count == 0) {
        const size_t each = stretch.size() / count;
        for (size_t i = 0; i < count; ++i)
          take_events(*spans[first + i], stretch.data() + i * each, each, Span::Timing::Plugin);
        timed += count;
      }
    }
    first = last;
  }
  return timed;
}

// No event names its program: each span takes the events that start after its launch and end
// before its completion was seen on the host (the device runs one program at a time).
size_t match_by_window(const std::vector<Span*>& spans,
                       const std::vector<const ProgramRun*>& events) {
  size_t timed = 0, next = 0;
  for (Span* span : spans) {
    while (next < events.size() && events[next]->start_ns < span->launch_start_ns) ++next;
    const size_t first = next;
    while (next < events.size() && events[next]->end_ns <= span->end_ns) ++next;
    if (next == first) continue;
    take_events(*span, events.data() + first, next - first, Span::Timing::PluginByWindow);
    ++timed;
  }
  return timed;
}

}  // namespace

std::string without_padding(std::string_view trace) {
  size_t end = 0;
  for (Fields field(trace); field.next();) end = field.position();
  return std::string(trace.substr(0, end));
}

std::vector<ProgramRun> device_events(std::string_view xspace) {
  std::vector<ProgramRun> events;
  for (Fields field(xspace); field.next();)
    if (field.number() == 1) read_plane(field.bytes(), events);
  std::stable_sort(events.begin(), events.end(), [](const ProgramRun& a, const ProgramRun& b) {
    return a.device != b.device ? a.device < b.device : a.start_ns < b.start_ns;
  });
  return events;
}

std::vector<ProgramRun> program_runs(std::string_view xspace) {
  std::vector<ProgramRun> runs;
  for (const ProgramRun& event : device_events(xspace)) {
    if (event.program.empty()) continue;
    ProgramRun* last = runs.empty() ? nullptr : &runs.back();
    if (last != nullptr && !event.module_event && last->device == event.device &&
        last->program == event.program) {
      last->start_ns = std::min(last->start_ns, event.start_ns);
      last->end_ns = std::max(last->end_ns, event.end_ns);
      ++last->events;
      continue;
    }
    runs.push_back(event);
  }
  return runs;
}

size_t use_device_times(std::vector<Span>& spans, std::string_view xspace) {
  const std::vector<ProgramRun> events = device_events(xspace);
  if (events.empty()) return 0;  // no plugin trace: every span keeps its host estimate
  std::map<int, std::vector<Span*>> launched;  // per device, in launch order
  for (Span& span : spans) {
    if (!span.on_device) continue;
    span.timing = Span::Timing::Unmatched;
    launched[span.device].push_back(&span);
  }
  std::map<int, std::vector<const ProgramRun*>> traced;
  for (const ProgramRun& event : events) traced[event.device].push_back(&event);
  // One chip per process (libtpu, the CUDA plugin with visible_devices): the plane may be named
  // after the chip's place on the host ("/device:TPU:2") while the process calls it tpu:0.
  if (traced.size() == 1 && launched.size() == 1 && !traced.contains(launched.begin()->first)) {
    auto only = traced.extract(traced.begin());
    only.key() = launched.begin()->first;
    traced.insert(std::move(only));
  }
  size_t timed = 0;
  for (auto& [device, device_spans] : launched) {
    std::stable_sort(device_spans.begin(), device_spans.end(), [](const Span* a, const Span* b) {
      return a->launch_start_ns < b->launch_start_ns;
    });
    const std::vector<const ProgramRun*>& device_events = traced[device];
    const bool named = std::any_of(device_events.begin(), device_events.end(),
                                   [](const ProgramRun* e) { return !e->program.empty(); });
    timed += named ? match_by_program(device_spans, device_events)
                   : match_by_window(device_spans, device_events);
  }
  return timed;
}

}  // namespace torch_tpu::profiler
