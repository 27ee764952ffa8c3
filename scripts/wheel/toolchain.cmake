# The portable wheel's toolchain (scripts/build_wheel.sh): the system's GCC, linking
# against KOLO_WHEEL_SYSROOT (scripts/wheel/sysroot.py made it for one manylinux tag,
# and the toolchain.cmake there sets it and includes this file) instead of the
# system's newer glibc and libstdc++:
#   - glibc's link stubs, libc_nonshared.a and crt1.o of the tag's glibc: every glibc
#     symbol binds to the version that glibc has, and one it lacks fails the link;
#   - the libstdc++ stub first (-lstdc++ in the standard libraries), then
#     -static-libstdc++: what the tag's libstdc++ has is the system's at run time,
#     only what is newer is copied in, hidden (--exclude-libs), as devtoolset does;
#   - glibc_compat.o: the newer glibc functions that libstdc++.a calls, hidden.
# Executables may link shared libraries (the system's libgcc_s, libmpi) that need a
# newer glibc here: those are the run-time machine's own there.
if(NOT EXISTS "${KOLO_WHEEL_SYSROOT}/lib/libstdc++.so")
  message(FATAL_ERROR "KOLO_WHEEL_SYSROOT='${KOLO_WHEEL_SYSROOT}' is no sysroot of "
    "scripts/wheel/sysroot.py: use the toolchain.cmake that it writes there")
endif()
set(_kolo_lib "${KOLO_WHEEL_SYSROOT}/lib")
set(_kolo_link "-L${_kolo_lib} -static-libstdc++ -Wl,--exclude-libs,libstdc++.a")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-B${_kolo_lib} ${_kolo_link} -Wl,--allow-shlib-undefined")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_kolo_link}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${_kolo_link}")
set(CMAKE_CXX_STANDARD_LIBRARIES "-lstdc++ ${_kolo_lib}/glibc_compat.o")
set(CMAKE_C_STANDARD_LIBRARIES "${_kolo_lib}/glibc_compat.o")
set(CMAKE_CUDA_STANDARD_LIBRARIES "-lstdc++ ${_kolo_lib}/glibc_compat.o")
