"""pstrain_fuzzer: one libFuzzer target plus a test replaying its seeds."""

def pstrain_fuzzer(name, srcs, deps):
    """Declares NAME (the fuzzer) and NAME_corpus_test.

    With --config=fuzz (clang, --define=pstrain_fuzz=on) NAME links
    libFuzzer's main; otherwise it links standalone_main.cc, which runs the
    target once per file given. NAME_corpus_test replays corpus/NAME/ in every
    ordinary `bazel test`.
    """
    native.cc_library(
        name = name + "_lib",
        testonly = True,
        srcs = srcs,
        # The target's entry point becomes PstrainFuzzTarget; fuzz_entry.cc
        # defines LLVMFuzzerTestOneInput around it (execution counts).
        local_defines = ["LLVMFuzzerTestOneInput=PstrainFuzzTarget"],
        deps = deps + [
            ":fuzz_entry",
            ":fuzz_input",
        ],
        alwayslink = True,
    )
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = select({
            ":libfuzzer": [],
            "//conditions:default": ["standalone_main.cc"],
        }),
        linkopts = select({
            ":libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = [":" + name + "_lib"],
    )
    native.cc_test(
        name = name + "_corpus_test",
        size = "small",
        srcs = ["standalone_main.cc"],
        args = ["tests/fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/**"]),
        deps = [":" + name + "_lib"],
    )
