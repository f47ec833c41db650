"""cc_grpc_proto: compiles one .proto with the system protoc + grpc_cpp_plugin.

Debian 12 ships protoc 3.21 and grpc_cpp_plugin 1.51 matching the system
libraries, so nothing is downloaded. Generated code is wrapped in a cc_library.
"""

def cc_grpc_proto(name, src, deps = [], visibility = None):
    base = src[:-len(".proto")]
    outs = [base + ext for ext in [".pb.h", ".pb.cc", ".grpc.pb.h", ".grpc.pb.cc"]]
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = outs,
        cmd = " ".join([
            "protoc",
            "--proto_path=.",
            "--cpp_out=$(GENDIR)",
            "--grpc_out=$(GENDIR)",
            "--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)",
            "$(location %s)" % src,
        ]),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party/system:grpc"],
        visibility = visibility,
    )
