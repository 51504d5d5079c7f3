/* Defect 12: the installed tree is relocatable and usable. Installs this
 * build into a temporary prefix, builds examples/hello_attn.c against it
 * with pkg-config and with CMake's find_package(attn), runs them, then
 * moves the whole prefix and runs the consumers and `attn example` again. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs a shell command quietly (output kept in log.txt); true on status 0. */
static bool sh(tu_group *g, const char *fmt, ...) ATTN_TU_PRINTF(2, 3);
static bool sh(tu_group *g, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[4200];
    snprintf(full, sizeof full, "(%s) >log.txt 2>&1", cmd);
    bool ok = system(full) == 0;
    if (!ok) {
        tu_group_fail(g, "failed: %s", cmd);
        if (system("tail -n 15 log.txt") != 0) fprintf(stderr, "(no log)\n");
    }
    return ok;
}

int main(int argc, char **argv)
{
    tu_options opt;
    if (!tu_parse_options(argc, argv, 1, &opt)) return 2;
    tu_suite s = {0};
    tu_group g;
    tu_group_begin(&g, &s, "install into a prefix, build against it, move it");
#ifdef ATTN_SANITIZED
    tu_group_skip(&g, "sanitizer build: consumers would need the sanitizer flags");
    tu_group_end(&g);
    tu_suite_finish(&s);
    return 0;
#endif
    if (getenv("ATTN_TEST_EMULATOR")) { /* a cross build: the host's cc cannot link it */
        printf("SKIP: test_install under %s (cross build: consumers are built by the host's cc)\n",
               getenv("ATTN_TEST_EMULATOR"));
        return 77; /* ctest: Skipped (SKIP_RETURN_CODE) */
    }
    if (system("command -v pkg-config >/dev/null 2>&1") != 0) {
        tu_group_fail(&g, "pkg-config is not installed");
        tu_group_end(&g);
        return tu_suite_finish(&s);
    }
    const char *dir = tu_scratch_dir("install");
    const char *hello = ATTN_SOURCE_DIR "/examples/hello_attn.c";
    bool ok = sh(&g, "cmake --install '%s' --prefix '%s/prefix'", ATTN_BUILD_DIR, dir);
    ok = ok && sh(&g, "PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig' && export PKG_CONFIG_PATH && "
                      "cc -o hello_pc '%s' $(pkg-config --cflags --libs attn) "
                      "-Wl,-rpath,'$ORIGIN/prefix/lib'",
                  dir, hello);
    ok = ok && sh(&g, "PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig' && export PKG_CONFIG_PATH && "
                      "cc -o hello_pc_static '%s' $(pkg-config --cflags attn) "
                      "'%s/prefix/lib/libattn.a' $(pkg-config --libs-only-other --static attn) "
                      "-lm",
                  dir, hello, dir);
    ok = ok && sh(&g, "cmake -S '%s/tests/install_consumer' -B consumer -DCMAKE_BUILD_TYPE=Release "
                      "-DCMAKE_PREFIX_PATH='%s/prefix' -DHELLO_SOURCE='%s' "
                      "-DCMAKE_BUILD_RPATH='%s/moved/lib;%s/prefix/lib' && "
                      "cmake --build consumer",
                  ATTN_SOURCE_DIR, dir, hello, dir, dir);
    tu_check(&g, ok, "install and build");
    tu_check(&g, ok && sh(&g, "./hello_pc && ./hello_pc_static && ./consumer/hello_shared && "
                              "./consumer/hello_static"),
             "the consumers run");
    /* each installed layer header compiles on its own, as C11 and as C++ */
    ok = ok && sh(&g, "cd prefix/include && ls attn/core.h attn/sdpa.h attn/kvcache.h attn/mha.h "
                      "attn/io.h attn/train.h && for h in attn.h attn/*.h; do "
                      "printf '#include <%%s>\\nint main(void){return 0;}\\n' \"$h\" > one.c && "
                      "cc -std=c11 -pedantic -Wall -Wextra -Werror -I. -c one.c -o one.o && "
                      "{ ! command -v c++ >/dev/null || c++ -x c++ -Wall -Werror -I. -c one.c "
                      "-o one.o; } || exit 1; done");
    tu_check(&g, ok, "every installed header is self-contained");
    /* relocated: the .pc, the CMake package and the CLI's fixtures follow */
    ok = ok && sh(&g, "mv prefix moved && mkdir -p elsewhere && cd elsewhere && "
                      "env -u ATTN_EXAMPLES_DIR ../moved/bin/attn example numpy");
    tu_check(&g, ok, "the moved tree's attn example finds its fixtures");
    ok = ok && sh(&g, "grep -q 'pcfiledir' moved/lib/pkgconfig/attn.pc && "
                      "PKG_CONFIG_PATH='%s/moved/lib/pkgconfig' pkg-config --cflags attn | "
                      "grep -q '%s/moved'",
                  dir, dir);
    tu_check(&g, ok, "attn.pc points into the moved prefix");
    ok = ok && sh(&g, "cmake -S '%s/tests/install_consumer' -B consumer2 "
                      "-DCMAKE_PREFIX_PATH='%s/moved' -DHELLO_SOURCE='%s' && "
                      "cmake --build consumer2 && ./consumer2/hello_static",
                  ATTN_SOURCE_DIR, dir, hello);
    tu_check(&g, ok, "find_package(attn) works from the moved prefix");
    tu_group_end(&g);
    return tu_suite_finish(&s);
}
