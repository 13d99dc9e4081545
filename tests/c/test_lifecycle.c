/* mcphost_free: embedded, no server process is left when it returns;
 * connected, the daemon's servers live on. */
#include <errno.h>
#include <signal.h>
#include "harness.h"

int main(void) {
    mcphost *h = open_handle(NULL);
    char *resp = request(h, "{\"method\": \"mcphost/servers/list\"}", MCPHOST_OK);
    REQUIRE(resp != NULL, "servers/list");
    int pids[16], n = 0;
    for (const char *p = resp; (p = strstr(p, "\"pid\":")) && n < 16; p += 6) pids[n++] = atoi(p + 6);
    mcphost_string_free(resp);
    CHECK(n >= 2, "server pids listed (%d)", n);
    mcphost_free(h);
    for (int i = 0; i < n; i++) {
        int alive = kill(pids[i], 0) == 0 || errno != ESRCH;
        if (connected())
            CHECK(alive, "the daemon's server %d lives on", pids[i]);
        else
            CHECK(!alive, "server %d is gone when mcphost_free returns", pids[i]);
    }
    return finish("test_lifecycle");
}
