// Prints the configuration table that docs/configuration.md carries between
// its "settings table" markers:  build/runtime/kolo_config_doc > table.md
#include <cstdio>

#include "config.h"

int main() {
  std::fputs(kolo::SettingsMarkdownTable().c_str(), stdout);
  return 0;
}
