# Writes OUT: a C++ file that holds the file IN as the string kMonitorPage.
file(READ "${IN}" content)
file(WRITE "${OUT}" "// Generated from launcher/monitor_page.html by embed_page.cmake.\n"
  "namespace kolo::launcher {\nextern const char kMonitorPage[];\n"
  "const char kMonitorPage[] = R\"KOLOPAGE(${content})KOLOPAGE\";\n}  // namespace kolo::launcher\n")
