// Horovod's readings of its variables (config_horovod.h).
#include "config_horovod.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

namespace kolo {
namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The number a value starts with, as strtol or strtof reads it.
template <typename T>
struct NumberPrefix {
  T value = 0;
  std::string text;  // the characters the number took, without leading spaces
  std::string rest;  // what it did not take, without trailing spaces
  bool none = true;  // the value starts with no number (read as 0)
};

template <typename T>
NumberPrefix<T> Split(T number, const char* begin, const char* end) {
  NumberPrefix<T> p;
  p.value = number;
  p.none = end == begin;
  p.text = Trim(std::string(begin, end));
  p.rest = Trim(end);
  return p;
}

NumberPrefix<long> Strtol(const std::string& value) {
  const char* begin = value.c_str();
  char* end = nullptr;
  const long v = std::strtol(begin, &end, 10);  // out of range: LONG_MAX / LONG_MIN, as Horovod
  return Split(v, begin, end);
}

// strtof's reading, as a double: strtod takes the same text, and 0.1 stays 0.1
// instead of float's 0.100000001490116.
NumberPrefix<double> Strtof(const std::string& value) {
  const char* begin = value.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  return Split(v, begin, end);
}

// Why the value reads as `reading` ("64 bytes"), or "" when it plainly says so.
template <typename T>
std::string PrefixNote(const NumberPrefix<T>& p, const std::string& reading) {
  if (p.none) {
    return reading + (p.rest.empty() ? ": the value is empty, which Horovod reads as 0"
                                     : ": it starts with no number, which Horovod reads as 0");
  }
  if (!p.rest.empty()) {
    return reading + ": Horovod reads the number it starts with and ignores '" + p.rest + "'";
  }
  return "";
}

HorovodReading Read(std::string value, std::string note = "") {
  return {std::move(value), std::move(note)};
}

using Reader = std::function<Result<HorovodReading>(const std::string&)>;

}  // namespace

HorovodAlias NoHorovodName() { return {}; }

HorovodAlias SameReading(const char* name, const char* syntax) {
  return {name, syntax, Reader([](const std::string& text) { return Read(text); })};
}

HorovodAlias HorovodFusionBytes(const char* name, int64_t max_bytes) {
  return {name, "strtol: bytes; `64M` reads as 64", Reader([max_bytes](const std::string& text) {
            const NumberPrefix<long> p = Strtol(text);
            const int64_t bytes = std::clamp<int64_t>(p.value, 0, max_bytes);
            const std::string reading = std::to_string(bytes) + " bytes";
            std::string note = PrefixNote(p, reading);
            if (!note.empty()) {
              note +=
                  "; write the threshold in bytes (67108864 for 64 MiB), or set "
                  "KOLO_FUSION_THRESHOLD, which takes K/M/G suffixes";
            } else if (p.value < 0) {
              note = reading + ": a negative threshold makes Horovod fuse nothing, as 0 does";
            } else if (p.value > max_bytes) {
              note = reading + ", kolo's largest fusion threshold";
            }
            return Read(std::to_string(bytes), note);
          })};
}

HorovodAlias HorovodCycleMs(const char* name, double max_ms) {
  return {name, "strtof: milliseconds; 0 or less = no pause",
          Reader([max_ms](const std::string& text) {
            const NumberPrefix<double> p = Strtof(text);
            // The number's own text where kolo takes it as it is ("0.1", not 0.1f).
            std::string value = p.none ? "0" : p.text, why;
            if (std::isnan(p.value)) {
              value = "0";
              why = ": not a number";
            } else if (p.value < 0) {
              value = "0";
              why = ": negative, so Horovod does not pause between cycles, as at 0";
            } else if (p.value > max_ms) {
              value = std::to_string(static_cast<int64_t>(max_ms));
              why = ", kolo's longest cycle time";
            }
            const std::string reading = value + " ms";
            std::string note = PrefixNote(p, reading);
            if (note.empty() && !why.empty()) note = reading + why;
            return Read(value, note);
          })};
}

HorovodAlias HorovodCacheCapacity(const char* name, int64_t max_entries) {
  return {name, "strtol into a 32-bit unsigned int", Reader([max_entries](const std::string& text) {
            const NumberPrefix<long> p = Strtol(text);
            const uint32_t horovods = static_cast<uint32_t>(p.value);  // -1: 4294967295
            const int64_t entries = std::min<int64_t>(horovods, max_entries);
            const std::string reading = std::to_string(entries) + " entries";
            std::string note = PrefixNote(p, reading);
            if (note.empty() && static_cast<int64_t>(horovods) != p.value) {
              note = reading + ": Horovod keeps the capacity in a 32-bit unsigned int, where " +
                     std::to_string(p.value) + " is " + std::to_string(horovods);
            }
            if (horovods > max_entries) {
              note += (note.empty() ? reading : std::string()) + "; " +
                      std::to_string(max_entries) + " is the most kolo's cache holds";
            }
            return Read(std::to_string(entries), note);
          })};
}

HorovodAlias HorovodStallCheckSeconds(const char* name) {
  return {name, "strtol: whole seconds; `1.5` reads as 1", Reader([](const std::string& text) {
            const NumberPrefix<long> p = Strtol(text);
            const long seconds = std::max(p.value, 0L);
            const std::string reading = std::to_string(seconds) + " s";
            std::string note = PrefixNote(p, reading);
            if (seconds == 0) {
              // Horovod's stall inspector then reports every tensor at every check.
              note += (note.empty() ? reading : std::string()) +
                      "; Horovod then warns about every tensor that waits at all, kolo warns "
                      "about none (HOROVOD_STALL_CHECK_DISABLE=1 turns the warnings off in both)";
            }
            return Read(std::to_string(seconds), note);
          })};
}

HorovodAlias HorovodStallShutdownSeconds(const char* name) {
  return {name, "strtol: whole seconds; 0 or less = never", Reader([](const std::string& text) {
            const NumberPrefix<long> p = Strtol(text);
            const long seconds = std::max(p.value, 0L);
            return Read(std::to_string(seconds), PrefixNote(p, std::to_string(seconds) + " s"));
          })};
}

HorovodAlias HorovodCount(const char* name, int64_t min, int64_t max) {
  return {name, "strtol: a whole number", Reader([min, max](const std::string& text) {
            const NumberPrefix<long> p = Strtol(text);
            const int64_t count = std::clamp<int64_t>(p.value, min, max);
            const std::string reading = std::to_string(count);
            std::string note = PrefixNote(p, reading);
            if (note.empty() && count != p.value) {
              note = reading + ", the nearest value kolo takes (" + std::to_string(min) + " to " +
                     std::to_string(max) + ")";
            }
            return Read(reading, note);
          })};
}

HorovodAlias HorovodSwitch(const char* name) {
  return {name, "strtol: > 0 = on; `true` reads as 0", Reader([](const std::string& text) {
            const NumberPrefix<long> p = Strtol(text);
            const bool on = p.value > 0;
            // An empty value is the usual way to unset a switch: off, without a note.
            std::string note;
            if (!Trim(text).empty()) note = PrefixNote(p, on ? "on (1)" : "off (0)");
            return Read(on ? "1" : "0", note);
          })};
}

HorovodAlias HorovodLogLevel(const char* name) {
  return {name, "`TRACE` to `FATAL`, else `WARNING`; `FATAL` = error",
          Reader([](const std::string& text) {
            std::string t = text;  // compared whole, as Horovod does: " info" is no level
            std::transform(t.begin(), t.end(), t.begin(),
                           [](unsigned char c) { return std::tolower(c); });
            if (t == "fatal") return Read("error");  // kolo's highest level
            if (t == "trace" || t == "debug" || t == "info" || t == "warning" || t == "error") {
              return Read(t);
            }
            return Read("warning", text.empty() ? ""
                                                : "warning: Horovod logs at WARNING for what is "
                                                  "not one of TRACE, DEBUG, INFO, WARNING, "
                                                  "ERROR or FATAL");
          })};
}

HorovodAlias HorovodTimelinePath(const char* name) {
  return {name, "path; `DYNAMIC` = off until `start_timeline()`",
          Reader([](const std::string& text) {
            const std::string path = Trim(text);
            return Read(path == "DYNAMIC" ? "" : path);
          })};
}

HorovodAlias HorovodrunWholeSeconds(const char* name) {
  return {
      name, "whole seconds (horovodrun's `int()`)",
      Reader([](const std::string& text) -> Result<HorovodReading> {
        const std::string t = Trim(text);
        const size_t sign = (!t.empty() && (t[0] == '-' || t[0] == '+')) ? 1 : 0;
        if (t.size() <= sign || !std::all_of(t.begin() + static_cast<std::ptrdiff_t>(sign), t.end(),
                                             [](unsigned char c) { return std::isdigit(c); })) {
          return Status::InvalidArgument(
              "is not a whole number of seconds (horovodrun reads it with int(), which "
              "refuses it); use the KOLO_ name for fractions of a second");
        }
        return Read(t);
      })};
}

}  // namespace kolo
