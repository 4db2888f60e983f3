"""@rules_cc//cc:defs.bzl for Bazel 4 without network: the native C++ rules."""

def cc_binary(**attrs):
    native.cc_binary(**attrs)

def cc_import(**attrs):
    native.cc_import(**attrs)

def cc_library(**attrs):
    native.cc_library(**attrs)

def cc_test(**attrs):
    native.cc_test(**attrs)

def cc_toolchain(**attrs):
    native.cc_toolchain(**attrs)

def cc_toolchain_suite(**attrs):
    native.cc_toolchain_suite(**attrs)
