/* Shared helpers of the C tests: open a handle in the mode the runner
 * chose (MCPHOST_TEST_MODE=embedded|connected), assertions, JSON checks.
 * scripts/test-c.sh compiles and runs every tests/c/test_*.c in both modes. */
#ifndef MCPHOST_TEST_HARNESS_H
#define MCPHOST_TEST_HARNESS_H


#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "mcphost.h"

static int failures = 0;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, \
                    #cond);                                                  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            failures++;                                                      \
        }                                                                    \
    } while (0)

/* Each macro evaluates its arguments once. */
#define REQUIRE(cond, ...)                                                   \
    do {                                                                     \
        int required_ = (cond);                                              \
        CHECK(required_, __VA_ARGS__);                                       \
        if (!required_) exit(1);                                             \
    } while (0)

#define CHECK_STATUS(got, want, err)                                         \
    do {                                                                     \
        mcphost_status got_ = (got);                                         \
        CHECK(got_ == (want), "status %s, want %s (%s)",                     \
              mcphost_status_name(got_), mcphost_status_name(want),          \
              (err) ? (err) : "no message");                                 \
    } while (0)

static inline const char *mode(void) {
    const char *m = getenv("MCPHOST_TEST_MODE");
    return m ? m : "embedded";
}

static inline int connected(void) { return strcmp(mode(), "connected") == 0; }

static inline char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

/* A handle in the runner's mode over the test config (test server "ts",
 * server-everything "ev"); exits the test if it cannot open. */
static inline mcphost *open_handle(mcphost_options *o) {
    mcphost *h = NULL;
    char *err = NULL;
    mcphost_status st;
    if (connected()) {
        st = mcphost_connect(getenv("MCPHOST_TEST_SOCKET"), o, &h, &err);
        /* The shared daemon may still be starting its servers. */
        for (int i = 0; st == MCPHOST_OK && i < 600; i++) {
            char *resp = NULL;
            if (mcphost_request(h, "{\"method\": \"mcphost/status\"}", &resp, NULL) != MCPHOST_OK) break;
            int starting = strstr(resp, "\"starting\"") != NULL || strstr(resp, "\"restarting\"") != NULL;
            mcphost_string_free(resp);
            if (!starting) break;
            nanosleep(&(struct timespec){0, 100000000L}, NULL);
        }
    } else {
        const char *path = getenv("MCPHOST_TEST_CONFIG");
        REQUIRE(path != NULL, "MCPHOST_TEST_CONFIG is not set");
        char *config = read_file(path);
        REQUIRE(config != NULL, "cannot read %s", path);
        mcphost_options *own = NULL;
        if (!o) o = own = mcphost_options_new();
        mcphost_options_set_wait_ready_ms(o, 60000);
        st = mcphost_open_embedded(config, o, &h, &err);
        if (own) mcphost_options_free(own);
        free(config);
    }
    REQUIRE(st == MCPHOST_OK && h != NULL, "open (%s): %s: %s", mode(),
            mcphost_status_name(st), err ? err : "");
    mcphost_string_free(err);
    return h;
}

/* Sends a request; returns the response (caller frees) or NULL. */
static inline char *request(mcphost *h, const char *json, mcphost_status want) {
    char *resp = NULL, *err = NULL;
    mcphost_status st = mcphost_request(h, json, &resp, &err);
    CHECK_STATUS(st, want, err);
    if (st != want) fprintf(stderr, "  request: %s\n  response: %s\n", json, resp ? resp : "(none)");
    mcphost_string_free(err);
    return resp;
}

static inline int contains(const char *haystack, const char *needle) {
    return haystack && needle && strstr(haystack, needle) != NULL;
}

static inline double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1000.0 + (double)t.tv_nsec / 1e6;
}

static inline void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* How many times the server `ts` logged `needle` (its stderr through
 * mcphost/servers/logs), or -1 if the request failed. */
static inline int server_log_count(mcphost *h, const char *needle) {
    char *resp = NULL;
    if (mcphost_request(h, "{\"method\": \"mcphost/servers/logs\", \"params\": {\"name\": \"ts\"}}", &resp, NULL) != MCPHOST_OK)
        return -1;
    int n = 0;
    for (const char *p = resp; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    mcphost_string_free(resp);
    return n;
}

/* How many calls of the test server's `tool` have started at it:
 * mcphost-testserver logs "in flight: tools/call TOOL" as a blocking call
 * starts. (Counted in its last 200 stderr lines: a few per test here.) */
static inline int in_flight_count(mcphost *h, const char *tool) {
    char needle[128];
    snprintf(needle, sizeof needle, "in flight: tools/call %s", tool);
    return server_log_count(h, needle);
}

/* Waits (20 s at most) until the `count`th call of `tool` is pending at the
 * server: a wait on that event, not on time. */
static inline int wait_in_flight(mcphost *h, const char *tool, int count) {
    double deadline = now_ms() + 20000;
    int n;
    while ((n = in_flight_count(h, tool)) < count && now_ms() < deadline) sleep_ms(20);
    CHECK(n >= count, "%d of %d calls of %s pending at the server", n, count, tool);
    return n >= count;
}

static inline int finish(const char *name) {
    if (failures) {
        fprintf(stderr, "%s (%s): %d check(s) failed\n", name, mode(), failures);
        return 1;
    }
    printf("%s (%s): ok\n", name, mode());
    return 0;
}

#endif
