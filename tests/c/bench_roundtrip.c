/* Round-trip cost of one tools/call (the test server's echo) through
 * mcphost_request, embedded and connected. Prints one line per mode:
 *   MODE p50_us p90_us calls
 * scripts/bench-ffi.sh runs it beside the Rust references (in-process
 * engine, daemon socket) and the Python binding, in one run.
 * Env: MCPHOST_TEST_CONFIG (embedded), MCPHOST_TEST_SOCKET (connected),
 * MCPHOST_BENCH_CALLS (default 2000). */
#include "harness.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench(const char *label, mcphost *h, int calls) {
    double *t = malloc(sizeof(double) * (size_t)calls);
    char req[256], want[64];
    for (int i = -500; i < calls; i++) { /* 500 warm-up calls */
        int n = i < 0 ? -i : i;
        snprintf(req, sizeof req,
                 "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__echo\", \"arguments\": {\"text\": \"c%d\"}}}", n);
        snprintf(want, sizeof want, "\"c%d\"", n);
        char *resp = NULL;
        double t0 = now_ms();
        mcphost_status st = mcphost_request(h, req, &resp, NULL);
        double dt = now_ms() - t0;
        REQUIRE(st == MCPHOST_OK && contains(resp, want), "%s: %s", label, resp ? resp : mcphost_status_name(st));
        mcphost_string_free(resp);
        if (i >= 0) t[i] = dt * 1000.0;
    }
    qsort(t, (size_t)calls, sizeof(double), cmp);
    printf("%s %.1f %.1f %d\n", label, t[calls / 2], t[calls * 9 / 10], calls);
    fflush(stdout);
    free(t);
}

int main(void) {
    const char *n = getenv("MCPHOST_BENCH_CALLS");
    int calls = n ? atoi(n) : 2000;
    setenv("MCPHOST_TEST_MODE", "embedded", 1);
    mcphost *h = open_handle(NULL);
    bench("c-embedded", h, calls);
    mcphost_free(h);
    setenv("MCPHOST_TEST_MODE", "connected", 1);
    h = open_handle(NULL);
    bench("c-connected", h, calls);
    mcphost_free(h);
    return failures != 0;
}
