/* A host that leaves SIGPIPE at its default must survive writes to a dead
 * server's pipe (embedded) and to a dead daemon's socket (connected). */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include "harness.h"

/* Reads initialize, closes its stdin, then answers and lives on: every
 * later write to it (notifications/initialized first) has no reader. */
static const char *DEAF =
    "import json, os, sys, time\\n"
    "m = json.loads(sys.stdin.readline())\\n"
    "os.close(0)\\n"
    "print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': {'protocolVersion': '2025-11-25', "
    "'capabilities': {'tools': {}}, 'serverInfo': {'name': 'deaf', 'version': '1'}}}), flush=True)\\n"
    "time.sleep(10)\\n";

int main(void) {
    signal(SIGPIPE, SIG_DFL);
    REQUIRE(getenv("MCPHOST_TEST_TESTSERVER") != NULL, "MCPHOST_TEST_TESTSERVER is not set");
    char config[4096];
    snprintf(config, sizeof config,
             "{\"servers\": {\"deaf\": {\"command\": \"python3\", \"args\": [\"-c\", \"%s\"], "
             "\"protocolVersion\": \"2025-11-25\"}, "
             "\"ts\": {\"command\": \"%s\"}}}",
             DEAF, getenv("MCPHOST_TEST_TESTSERVER"));
    mcphost_options *o = mcphost_options_new();
    mcphost_options_set_wait_ready_ms(o, 20000);
    mcphost *h = NULL;
    char *err = NULL;
    mcphost_status st = mcphost_open_embedded(config, o, &h, &err);
    REQUIRE(st == MCPHOST_OK, "open: %s", err);
    mcphost_options_free(o);
    /* Writes to the deaf server (initialized, tools/list, pings) hit a pipe
     * without a reader; we are still here to check the other server. */
    for (int i = 0; i < 5; i++) {
        char *resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__echo\", \"arguments\": {\"text\": \"alive\"}}}", MCPHOST_OK);
        CHECK(contains(resp, "alive"), "%s", resp);
        mcphost_string_free(resp);
        char *r2 = NULL;
        mcphost_request(h, "{\"method\": \"mcphost/servers/restart\", \"params\": {\"name\": \"deaf\"}}", &r2, NULL);
        mcphost_string_free(r2);
        sleep_ms(200);
    }
    mcphost_free(h);

    /* Connected: a daemon of our own, killed under the connection. */
    const char *bin = getenv("MCPHOST_TEST_MCPHOST");
    REQUIRE(bin != NULL, "MCPHOST_TEST_MCPHOST is not set");
    char dir[] = "/tmp/mcphost-sigpipe-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    char cfg[512], sock[512];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(sock, sizeof sock, "%s/d.sock", dir);
    FILE *f = fopen(cfg, "w");
    fprintf(f, "{\"servers\": {}}\n");
    fclose(f);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("MCPHOST_STATE_DIR", dir, 1);
        execl(bin, bin, "daemon", "--config", cfg, "--socket", sock, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200 && access(sock, F_OK) != 0; i++) sleep_ms(50);
    st = mcphost_connect(sock, NULL, &h, &err);
    REQUIRE(st == MCPHOST_OK, "connect: %s", err);
    char *resp = request(h, "{\"method\": \"ping\"}", MCPHOST_OK);
    mcphost_string_free(resp);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int closed = 0;
    for (int i = 0; i < 5; i++) {
        resp = NULL;
        st = mcphost_request(h, "{\"method\": \"tools/list\"}", &resp, &err);
        if (st == MCPHOST_ERR_CLOSED) closed++;
        CHECK(st != MCPHOST_OK, "a request to a dead daemon fails (%s)", mcphost_status_name(st));
        mcphost_string_free(resp);
        mcphost_string_free(err);
        err = NULL;
    }
    CHECK(closed > 0, "MCPHOST_ERR_CLOSED for a lost daemon");
    mcphost_free(h);
    unlink(sock);
    char lock[600];
    snprintf(lock, sizeof lock, "%s.lock", sock);
    unlink(lock);
    unlink(cfg);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return finish("test_sigpipe");
}
