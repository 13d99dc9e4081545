/* A connected handle outlives its daemon: the daemon is SIGKILLed and a new
 * one started on the same socket; the host's next request works without
 * reopening, and it hears `reconnected` then `tools/list_changed`. The test
 * runs its own daemon (the runner's is shared), so both modes run it the
 * same way. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int reconnected = 0, tools_changed_after = 0, disconnected = 0;

static void on_event(void *ud, const char *event_json) {
    (void)ud;
    pthread_mutex_lock(&mu);
    if (contains(event_json, MCPHOST_EVENT_DISCONNECTED)) disconnected++;
    if (contains(event_json, MCPHOST_EVENT_RECONNECTED)) reconnected++;
    if (reconnected && contains(event_json, MCPHOST_EVENT_TOOLS_LIST_CHANGED)) tools_changed_after++;
    pthread_mutex_unlock(&mu);
}

static int get(int *v) {
    pthread_mutex_lock(&mu);
    int x = *v;
    pthread_mutex_unlock(&mu);
    return x;
}

static char dir[] = "/tmp/mcphost-c-reconnect-XXXXXX";
static char socket_path[256], config_path[256], state_path[256];

static pid_t start_daemon(void) {
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        setenv("MCPHOST_STATE_DIR", state_path, 1);
        setenv("MCPHOST_NO_AUTOSTART", "1", 1);
        const char *mcphost = getenv("MCPHOST_TEST_MCPHOST");
        execl(mcphost, mcphost, "daemon", "--config", config_path, "--socket", socket_path, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Until the new daemon's socket exists (a connection to it is the library's). */
static void wait_socket(void) {
    for (int i = 0; i < 400 && access(socket_path, F_OK) != 0; i++) sleep_ms(25);
    REQUIRE(access(socket_path, F_OK) == 0, "the daemon's socket appeared");
}

int main(void) {
    REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(socket_path, sizeof socket_path, "%s/d.sock", dir);
    snprintf(config_path, sizeof config_path, "%s/config.json", dir);
    snprintf(state_path, sizeof state_path, "%s/state", dir);
    FILE *f = fopen(config_path, "w");
    REQUIRE(f != NULL, "write the config");
    fprintf(f, "{\"loginShellPath\": false, \"servers\": {\"ts\": {\"command\": \"%s\"}}}\n",
            getenv("MCPHOST_TEST_TESTSERVER"));
    fclose(f);

    pid_t daemon = start_daemon();
    wait_socket();
    mcphost_options *o = mcphost_options_new();
    mcphost_options_set_event_callback(o, on_event, NULL, NULL);
    mcphost *h = NULL;
    char *err = NULL;
    mcphost_status st = MCPHOST_ERR_NOT_RUNNING;
    for (int i = 0; i < 200 && st != MCPHOST_OK; i++) {
        mcphost_string_free(err);
        err = NULL;
        st = mcphost_connect(socket_path, o, &h, &err);
        if (st != MCPHOST_OK) sleep_ms(25);
    }
    mcphost_options_free(o);
    REQUIRE(st == MCPHOST_OK, "connect: %s", err ? err : "");
    /* The daemon's first listing waits for its servers. */
    char *resp = request(h, "{\"method\": \"tools/list\"}", MCPHOST_OK);
    CHECK(contains(resp, "ts__echo"), "the first listing: %.200s", resp);
    mcphost_string_free(resp);
    resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__echo\", \"arguments\": {\"text\": \"before\"}}}", MCPHOST_OK);
    CHECK(contains(resp, "before"), "a call before: %s", resp);
    mcphost_string_free(resp);

    kill(daemon, SIGKILL);
    waitpid(daemon, NULL, 0);
    daemon = start_daemon();
    wait_socket();
    /* A request racing the close may fail ("send it again"); once the
     * library has said it is back, the next one works without reopening. */
    for (int i = 0; i < 400 && (get(&reconnected) == 0 || get(&tools_changed_after) == 0); i++) sleep_ms(25);
    CHECK(get(&reconnected) == 1, "one reconnected event (%d)", get(&reconnected));
    CHECK(get(&tools_changed_after) >= 1, "tools/list_changed after it (%d)", get(&tools_changed_after));
    resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__echo\", \"arguments\": {\"text\": \"after\"}}}", MCPHOST_OK);
    CHECK(contains(resp, "after"), "the next call, on the new daemon: %s", resp);
    mcphost_string_free(resp);

    mcphost_free(h);
    kill(daemon, SIGTERM);
    waitpid(daemon, NULL, 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "clean up %s", dir);
    (void)disconnected;
    return finish("test_reconnect");
}
