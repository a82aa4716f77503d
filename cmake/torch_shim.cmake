# The C++ half of the PyTorch plug (libstalloc/src/interop/torch_shim.cpp), whose malloc throws
# where stalloc has no block (PyTorch takes a NULL as a tensor at address 0). Built twice:
# - libstalloc_torch_generic.so wherever a C++ compiler is found: no PyTorch header, throws
#   std::runtime_error (RuntimeError in Python), loads against any PyTorch;
# - libstalloc_torch.so only where PyTorch's headers and libc10 are found (from STALLOC_TORCH_DIR,
#   torch's package folder, or from the Python that runs the build): throws
#   c10::OutOfMemoryError (torch.cuda.OutOfMemoryError), loads against that PyTorch's libc10.
# torch_backend.plug_library() takes the first that loads. The rest of stalloc is C either way.
set(STALLOC_TORCH_DIR "" CACHE PATH "torch's package folder (holding include/ and lib/); empty: ask Python")
set(STALLOC_TORCH_SHIM OFF)
set(STALLOC_TORCH_GENERIC OFF)
if(STALLOC_BUILD_FUZZ)
  return() # the fuzz targets need neither, and their flags are clang's
endif()
include(CheckLanguage)
check_language(CXX)
if(NOT CMAKE_CXX_COMPILER)
  message(STATUS "stalloc: no C++ compiler: libstalloc_torch and libstalloc_torch_generic not built")
  return()
endif()
enable_language(CXX)
set(STALLOC_TORCH_GENERIC ON)
add_library(stalloc_torch_generic SHARED "${CMAKE_CURRENT_SOURCE_DIR}/libstalloc/src/interop/torch_shim.cpp")
target_compile_definitions(stalloc_torch_generic PRIVATE STALLOC_TORCH_GENERIC)
target_link_libraries(stalloc_torch_generic PRIVATE stalloc)
set_target_properties(stalloc_torch_generic PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
  CXX_VISIBILITY_PRESET hidden INSTALL_RPATH "$ORIGIN")
if(STALLOC_INSTALL OR SKBUILD)
  install(TARGETS stalloc_torch_generic LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
if(STALLOC_SANITIZE)
  return() # libc10 is not built with the sanitizers' runtime
endif()
set(_torch_dir "${STALLOC_TORCH_DIR}")
set(_torch_abi "")
set(_py "${Python_EXECUTABLE}")
if(NOT _py)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(_py "${Python3_EXECUTABLE}")
endif()
if(_py)
  execute_process(COMMAND "${_py}" -c
    "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
    OUTPUT_VARIABLE _out RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_rc EQUAL 0)
    string(REPLACE "\n" ";" _out "${_out}")
    list(GET _out 1 _torch_abi)
    if(NOT _torch_dir)
      list(GET _out 0 _torch_dir)
    endif()
  endif()
endif()
if(NOT _torch_dir OR NOT EXISTS "${_torch_dir}/include/c10/util/Exception.h" OR NOT EXISTS "${_torch_dir}/lib/libc10.so")
  message(STATUS "stalloc: PyTorch headers not found: libstalloc_torch (typed OOM, capture refusal) not built")
  return()
endif()
message(STATUS "stalloc: building libstalloc_torch against ${_torch_dir}")
set(STALLOC_TORCH_SHIM ON)
add_library(stalloc_torch SHARED "${CMAKE_CURRENT_SOURCE_DIR}/libstalloc/src/interop/torch_shim.cpp")
target_include_directories(stalloc_torch SYSTEM PRIVATE "${_torch_dir}/include")
target_link_libraries(stalloc_torch PRIVATE stalloc "${_torch_dir}/lib/libc10.so")
set_target_properties(stalloc_torch PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
  CXX_VISIBILITY_PRESET hidden INSTALL_RPATH "$ORIGIN")
if(NOT _torch_abi STREQUAL "")
  target_compile_definitions(stalloc_torch PRIVATE _GLIBCXX_USE_CXX11_ABI=${_torch_abi})
endif()
set(STALLOC_TORCH_LIB_DIR "${_torch_dir}/lib")
set(STALLOC_TORCH_INCLUDE_DIR "${_torch_dir}/include")
if(STALLOC_INSTALL OR SKBUILD)
  install(TARGETS stalloc_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
