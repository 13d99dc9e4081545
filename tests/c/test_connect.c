/* Connected mode's errors: no daemon, and a daemon of another release or
 * something that is not mcphost at all (a fake daemon on a socket). */
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "harness.h"

static char sock_path[108];
static const char *fake_name, *fake_version;

static void *fake_daemon(void *arg) {
    int ls = *(int *)arg;
    int c = accept(ls, NULL, NULL);
    char buf[8192];
    size_t n = 0;
    while (n < sizeof buf - 1) {
        ssize_t k = read(c, buf + n, sizeof buf - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
        if (memchr(buf, '\n', n)) break;
    }
    buf[n] = 0;
    const char *id = strstr(buf, "\"id\":");
    int idn = id ? atoi(id + 5) : 0;
    char out[1024];
    int len = snprintf(out, sizeof out,
                       "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"protocolVersion\":\"2025-11-25\","
                       "\"capabilities\":{},\"serverInfo\":{\"name\":\"%s\",\"version\":\"%s\"}}}\n",
                       idn, fake_name, fake_version);
    if (write(c, out, (size_t)len) < 0) perror("write");
    /* The scenario: a fake daemon that answers, lingers, then hangs up. */
    sleep_ms(500);
    close(c);
    return NULL;
}

static mcphost_status connect_fake(const char *name, const char *version, char **err) {
    fake_name = name;
    fake_version = version;
    unlink(sock_path);
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {0};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock_path);
    REQUIRE(bind(ls, (struct sockaddr *)&a, sizeof a) == 0, "bind %s", sock_path);
    listen(ls, 1);
    pthread_t t;
    pthread_create(&t, NULL, fake_daemon, &ls);
    mcphost *h = NULL;
    mcphost_status st = mcphost_connect(sock_path, NULL, &h, err);
    CHECK(h == NULL, "no handle on failure");
    pthread_join(t, NULL);
    close(ls);
    unlink(sock_path);
    return st;
}

int main(void) {
    char *err = NULL;
    mcphost *h = NULL;
    mcphost_status st = mcphost_connect("/nonexistent/mcphost.sock", NULL, &h, &err);
    CHECK_STATUS(st, MCPHOST_ERR_NOT_RUNNING, err);
    CHECK(contains(err, "mcphost daemon"), "says how to start one: %s", err);
    CHECK(h == NULL, "no handle");
    mcphost_string_free(err);

    snprintf(sock_path, sizeof sock_path, "/tmp/mcphost-fake-%d.sock", (int)getpid());
    st = connect_fake("mcphost", "9.9.9", &err);
    CHECK_STATUS(st, MCPHOST_ERR_VERSION_MISMATCH, err);
    CHECK(contains(err, "9.9.9") && contains(err, mcphost_version()) && contains(err, "restart the daemon"),
          "names both versions and the fix: %s", err);
    mcphost_string_free(err);

    st = connect_fake("some-other-server", "1.0.0", &err);
    CHECK_STATUS(st, MCPHOST_ERR_VERSION_MISMATCH, err);
    CHECK(contains(err, "not an mcphost daemon"), "%s", err);
    mcphost_string_free(err);

    /* The real daemon is our release. */
    if (connected()) {
        h = open_handle(NULL);
        mcphost_free(h);
    }
    return finish("test_connect");
}
