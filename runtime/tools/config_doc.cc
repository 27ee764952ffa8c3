// Prints the tables that docs/configuration.md carries between its markers:
//   build/runtime/kolo_config_doc                        the settings table
//   build/runtime/kolo_config_doc --horovod-unsupported  the Horovod variables kolo ignores
#include <cstdio>
#include <cstring>

#include "config.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--horovod-unsupported") == 0) {
    std::fputs(kolo::UnsupportedHorovodMarkdownTable().c_str(), stdout);
  } else if (argc > 1) {
    std::fprintf(stderr, "usage: kolo_config_doc [--horovod-unsupported]\n");
    return 2;
  } else {
    std::fputs(kolo::SettingsMarkdownTable().c_str(), stdout);
  }
  return 0;
}
