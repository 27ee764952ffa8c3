// Reading the configuration: the environment and init()'s overrides through
// the settings table (config_table.cc), Horovod's aliases first, and the
// names that are no setting sorted into notes for rank 0 to log.
#include <algorithm>
#include <cstring>

#include "config.h"
#include "kolo/launch_settings.h"

extern char** environ;

namespace kolo {

const Setting* FindSetting(const std::string& name) {
  for (const Setting& s : Settings()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool StartsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// `name` is `family` or extends it (HOROVOD_AUTOTUNE_LOG for HOROVOD_AUTOTUNE).
bool InFamily(const std::string& name, const std::string& family) {
  return name == family ||
         (name.size() > family.size() + 1 && name.compare(0, family.size(), family) == 0 &&
          name[family.size()] == '_');
}

// An entry of UnsupportedHorovodVariables(): "NAME", or "NAME*" for the family.
bool Matches(const std::string& name, const std::string& entry) {
  if (entry.empty() || entry.back() != '*') return name == entry;
  return InFamily(name, entry.substr(0, entry.size() - 1));
}

// Variables that only Horovod's build reads (pip install horovod): often left
// exported in a Dockerfile or a shell profile after building Horovod. They
// mean nothing at run time in Horovod either, so kolo ignores them silently;
// warning on every job would teach users to ignore kolo's warnings.
// (HOROVOD_START_TIMEOUT is a setting's alias: KOLO_START_TIMEOUT.)
bool IsHorovodBuildVariable(const std::string& name) {
  static const char* const kFamilies[] = {"HOROVOD_WITH",
                                          "HOROVOD_WITHOUT",
                                          "HOROVOD_GPU",
                                          "HOROVOD_CUDA",
                                          "HOROVOD_ROCM",
                                          "HOROVOD_NCCL",
                                          "HOROVOD_BUILD",
                                          "HOROVOD_MPICXX_SHOW",
                                          "HOROVOD_CMAKE",
                                          "HOROVOD_DEBUG",
                                          "HOROVOD_ALLOW_MIXED_GPU_IMPL"};
  for (const char* f : kFamilies) {
    if (InFamily(name, f)) return true;
  }
  return false;
}

const Setting* FindHorovodAlias(const std::string& name) {
  for (const Setting& s : Settings()) {
    if (*s.horovod.name != '\0' && name == s.horovod.name) return &s;
  }
  return nullptr;
}

const UnsupportedHorovodVariable* FindUnsupported(const std::string& name) {
  for (const UnsupportedHorovodVariable& u : UnsupportedHorovodVariables()) {
    if (Matches(name, u.name)) return &u;
  }
  return nullptr;
}

using Source = std::vector<std::pair<std::string, std::string>>;

// Sorts the names that are no setting into `notes`.
void NoteUnknownNames(const Source& source, ConfigNotes* notes) {
  for (const auto& [name, value] : source) {
    if (FindSetting(name) != nullptr || FindHorovodAlias(name) != nullptr) continue;
    if (!StartsWith(name, "HOROVOD_")) {
      notes->unknown.push_back(name);
    } else if (FindUnsupported(name) != nullptr) {
      notes->horovod_unsupported.push_back(name);
    } else if (!IsHorovodBuildVariable(name)) {
      notes->horovod_unknown.push_back(name);
    }
  }
}

Status Apply(const Setting& setting, const std::string& name, const std::string& value,
             Config* config) {
  Status s = setting.field.parse(value, config);
  if (!s.ok()) return Status::InvalidArgument(name + "='" + value + "' " + s.message());
  return Status::OK();
}

// Reads the HOROVOD_* aliases whose KOLO_ name is set in no source (the last
// source that sets one wins), before any KOLO_ name is read.
Status ApplyHorovodAliases(const std::vector<const Source*>& sources, Config* config,
                           ConfigNotes* notes) {
  for (const Setting& setting : Settings()) {
    if (*setting.horovod.name == '\0') continue;
    const std::pair<std::string, std::string>* alias = nullptr;
    bool kolo_set = false;
    for (const Source* source : sources) {
      for (const auto& entry : *source) {
        if (entry.first == setting.horovod.name) alias = &entry;
        kolo_set |= entry.first == setting.name;
      }
    }
    if (alias == nullptr) continue;
    const std::string& value = alias->second;
    if (kolo_set) {
      notes->aliases_overridden.push_back({alias->first, value, setting.name, ""});
      continue;
    }
    Result<HorovodReading> reading = setting.horovod.translate(value);
    if (!reading.ok()) {
      return Status::InvalidArgument(alias->first + "='" + value + "' " +
                                     reading.status().message());
    }
    const HorovodReading& read = reading.value();
    KOLO_RETURN_IF_ERROR(Apply(setting, alias->first, read.value, config));
    notes->aliases_used.push_back({alias->first, value, setting.name, read.value});
    if (!read.note.empty()) {
      notes->horovod_misread.push_back(alias->first + "='" + value +
                                       "' is read as Horovod reads it, as " + read.note);
    }
    notes->given.push_back(setting.name);
  }
  return Status::OK();
}

}  // namespace

std::string ClosestSettingName(const std::string& name) {
  std::vector<std::string> candidates;
  for (const Setting& s : Settings()) {
    candidates.push_back(s.name);
    if (*s.horovod.name != '\0') candidates.push_back(s.horovod.name);
  }
  for (const UnsupportedHorovodVariable& u : UnsupportedHorovodVariables()) {
    std::string entry = u.name;
    if (!entry.empty() && entry.back() == '*') entry.pop_back();
    candidates.push_back(entry);
  }
  std::string best;
  size_t best_distance = 5;
  for (const std::string& candidate : candidates) {
    size_t d = EditDistance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

Result<Config> ParseConfig(const Source& environment, const Source& overrides, ConfigNotes* notes) {
  ConfigNotes ignored;
  if (notes == nullptr) notes = &ignored;
  Config config;
  KOLO_RETURN_IF_ERROR(ApplyHorovodAliases({&environment, &overrides}, &config, notes));
  for (const Source* source : {&environment, &overrides}) {
    NoteUnknownNames(*source, notes);
    for (const auto& [name, value] : *source) {
      const Setting* setting = FindSetting(name);
      if (setting == nullptr) continue;
      KOLO_RETURN_IF_ERROR(Apply(*setting, name, value, &config));
      if (!notes->Given(name)) notes->given.push_back(name);
    }
  }
  if (config.stall_shutdown_seconds > 0 && !config.stall_check_disabled &&
      config.stall_shutdown_seconds < config.stall_check_seconds) {
    // A shutdown before the first warning would fail jobs without a diagnosis.
    config.stall_check_seconds = config.stall_shutdown_seconds;
  }
  return config;
}

Result<Config> ParseConfig(const Source& environment, const Source& overrides,
                           std::vector<std::string>* unknown) {
  ConfigNotes notes;
  Result<Config> config = ParseConfig(environment, overrides, &notes);
  if (unknown != nullptr) {
    *unknown = notes.unknown;
    unknown->insert(unknown->end(), notes.horovod_unknown.begin(), notes.horovod_unknown.end());
  }
  return config;
}

bool ConfigNotes::Given(const std::string& kolo_name) const {
  return std::find(given.begin(), given.end(), kolo_name) != given.end();
}

std::string ConfigNotes::AliasLine() const {
  std::string used, overridden;
  for (const Alias& a : aliases_used) {
    used += (used.empty() ? "using " : ", ") + a.horovod_name + "=" + a.horovod_value + " as " +
            a.kolo_name;
    if (a.kolo_value != a.horovod_value) {
      used += "=" + (a.kolo_value.empty() ? std::string("''") : a.kolo_value);
    }
  }
  for (const Alias& a : aliases_overridden) {
    overridden += (overridden.empty() ? "not using " : ", ") + a.horovod_name + " (" + a.kolo_name +
                  " is set and wins)";
  }
  if (used.empty() && overridden.empty()) return "";
  return "Horovod settings: " + used + (used.empty() || overridden.empty() ? "" : "; ") +
         overridden;
}

std::vector<std::string> ConfigNotes::Warnings() const {
  std::vector<std::string> out;
  auto did_you_mean = [](const std::string& name) {
    std::string close = ClosestSettingName(name);
    return close.empty() ? std::string() : "; did you mean " + close + "?";
  };
  for (const std::string& name : unknown) {
    out.push_back(name + " is not a kolo setting and is ignored" + did_you_mean(name));
  }
  for (const std::string& name : horovod_unsupported) {
    out.push_back(name + " is ignored: " + FindUnsupported(name)->instead);
  }
  for (const std::string& name : horovod_unknown) {
    out.push_back(name + " is not a Horovod setting that kolo knows and is ignored" +
                  did_you_mean(name));
  }
  out.insert(out.end(), horovod_misread.begin(), horovod_misread.end());
  return out;
}

std::vector<std::pair<std::string, std::string>> KoloEnvironment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "KOLO_", 5) != 0 && std::strncmp(*e, "HOROVOD_", 8) != 0) continue;
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    out.emplace_back(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return out;
}

namespace {

LaunchSettings ForLauncher(const Config& config, const ConfigNotes& notes) {
  LaunchSettings s;
  s.python = config.python;
  s.python_given = notes.Given("KOLO_PYTHON");
  s.stall_shutdown_seconds = config.stall_check_disabled ? 0 : config.stall_shutdown_seconds;
  s.elastic_timeout_seconds = config.elastic_timeout_seconds;
  s.tf_ops = config.tf_ops;
  return s;
}

}  // namespace

Result<LaunchSettings> ReadLaunchSettings() {
  ConfigNotes notes;
  KOLO_ASSIGN_OR_RETURN(Config config, ParseConfig(KoloEnvironment(), {}, &notes));
  return ForLauncher(config, notes);
}

LaunchSettings DefaultLaunchSettings() { return ForLauncher(Config{}, ConfigNotes{}); }

std::string SettingsMarkdownTable() {
  const Config defaults;
  std::string out = "| variable | default | meaning | Horovod alias |\n| --- | --- | --- | --- |\n";
  for (const Setting& s : Settings()) {
    std::string alias = *s.horovod.name == '\0'
                            ? std::string("—")
                            : std::string("`") + s.horovod.name + "` (" + s.horovod.syntax + ")";
    out += std::string("| `") + s.name + "` | " + s.field.describe(defaults) + " | " + s.meaning +
           " | " + alias + " |\n";
  }
  return out;
}

std::string UnsupportedHorovodMarkdownTable() {
  std::string out =
      "| Horovod variable (`*`: and the names that extend it) | kolo |\n| --- | --- |\n";
  for (const UnsupportedHorovodVariable& u : UnsupportedHorovodVariables()) {
    out += std::string("| `") + u.name + "` | ignored: " + u.instead + " |\n";
  }
  return out;
}

}  // namespace kolo
