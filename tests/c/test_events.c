/* Events by callback and by polling (next_event and the event fd), and
 * progress with the caller's own token. */
#include <poll.h>
#include <pthread.h>
#include "harness.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int states = 0, progress = 0, tools_changed = 0, logs = 0;
static void on_event(void *ud, const char *event_json) {
    (void)ud;
    pthread_mutex_lock(&mu);
    if (contains(event_json, MCPHOST_EVENT_SERVER_STATE)) states++;
    if (contains(event_json, MCPHOST_EVENT_TOOLS_LIST_CHANGED)) tools_changed++;
    if (contains(event_json, MCPHOST_EVENT_MESSAGE) && contains(event_json, "\"dev.mcphost/server\":\"ev\"")) logs++;
    if (contains(event_json, MCPHOST_EVENT_PROGRESS) && contains(event_json, "\"progressToken\":\"c-token\"")) progress++;
    pthread_mutex_unlock(&mu);
}

static int count(int *n) {
    pthread_mutex_lock(&mu);
    int v = *n;
    pthread_mutex_unlock(&mu);
    return v;
}

int main(void) {
    /* By callback. */
    mcphost_options *o = mcphost_options_new();
    mcphost_options_set_event_callback(o, on_event, NULL, NULL);
    mcphost *h = open_handle(o);
    mcphost_options_free(o);
    char *err = NULL;
    mcphost_status st = mcphost_next_event(h, 0, &err, NULL);
    CHECK_STATUS(st, MCPHOST_ERR_UNSUPPORTED, NULL);
    char *resp = request(h, "{\"method\": \"mcphost/servers/restart\", \"params\": {\"name\": \"ts2\"}}", MCPHOST_OK);
    mcphost_string_free(resp);
    for (int i = 0; i < 200 && count(&states) == 0; i++) sleep_ms(50);
    CHECK(count(&states) > 0, "server_state events by callback after a restart");
    /* A server leaving and coming back changes the catalog. */
    resp = request(h, "{\"method\": \"mcphost/servers/disable\", \"params\": {\"name\": \"ts2\"}}", MCPHOST_OK);
    mcphost_string_free(resp);
    resp = request(h, "{\"method\": \"mcphost/servers/enable\", \"params\": {\"name\": \"ts2\"}}", MCPHOST_OK);
    mcphost_string_free(resp);
    for (int i = 0; i < 200 && count(&tools_changed) == 0; i++) sleep_ms(50);
    CHECK(count(&tools_changed) > 0, "tools/list_changed events by callback");
    /* server-everything's simulated logging sends one message at once and
     * then one every 5 s, outside any call: the host gets those because it
     * asked for the server's logs. The tool toggles (the daemon of connected
     * mode is shared between runs), so it is called until it says Started. */
    resp = request(h, "{\"method\": \"logging/setLevel\", \"params\": {\"level\": \"debug\", \"_meta\": {\"dev.mcphost/server\": \"ev\"}}}", MCPHOST_OK);
    mcphost_string_free(resp);
    int started = 0;
    for (int i = 0; i < 2 && !started; i++) {
        resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ev__toggle-simulated-logging\", \"arguments\": {}}}", MCPHOST_OK);
        started = contains(resp, "Started simulated");
        mcphost_string_free(resp);
    }
    CHECK(started, "server-everything's simulated logging started");
    for (int i = 0; i < 300 && count(&logs) == 0; i++) sleep_ms(50);
    CHECK(count(&logs) > 0, "server log events (notifications/message from ev) by callback");
    resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__slow\", \"arguments\": {\"ms\": 450}, \"_meta\": {\"progressToken\": \"c-token\"}}}", MCPHOST_OK);
    mcphost_string_free(resp);
    for (int i = 0; i < 100 && count(&progress) < 2; i++) sleep_ms(20);
    CHECK(count(&progress) >= 2, "progress events with the caller's token: %d", count(&progress));
    mcphost_free(h);

    /* A timeout, on a handle with no servers (and so no events). */
    mcphost *quiet = NULL;
    CHECK_STATUS(mcphost_open_embedded("{\"servers\": {}}", NULL, &quiet, &err), MCPHOST_OK, err);
    char *ev = NULL;
    int qfd = -1;
    CHECK_STATUS(mcphost_event_fd(quiet, &qfd, NULL), MCPHOST_OK, NULL);
    double t0 = now_ms();
    st = mcphost_next_event(quiet, 50, &ev, NULL);
    CHECK_STATUS(st, MCPHOST_ERR_TIMEOUT, NULL);
    CHECK(ev == NULL, "no event on timeout: %s", ev);
    CHECK(now_ms() - t0 >= 49, "waited the timeout (%.1f ms)", now_ms() - t0);
    struct pollfd q = {qfd, POLLIN, 0};
    CHECK(poll(&q, 1, 0) == 0, "an empty queue's fd is not readable");
    mcphost_free(quiet);

    /* By polling: the fd is readable exactly while events wait. */
    h = open_handle(NULL);
    int fd = -1;
    CHECK_STATUS(mcphost_event_fd(h, &fd, &err), MCPHOST_OK, err);
    /* Drain until quiet for 300 ms (the restart above may still report). */
    while (mcphost_next_event(h, 300, &ev, NULL) == MCPHOST_OK) mcphost_string_free(ev);
    struct pollfd p = {fd, POLLIN, 0};
    /* Readable only while an event waits (server-everything may log). */
    if (poll(&p, 1, 0) == 1) {
        CHECK_STATUS(mcphost_next_event(h, 0, &ev, NULL), MCPHOST_OK, NULL);
        mcphost_string_free(ev);
    }
    resp = request(h, "{\"method\": \"mcphost/servers/restart\", \"params\": {\"name\": \"ts2\"}}", MCPHOST_OK);
    mcphost_string_free(resp);
    CHECK(poll(&p, 1, 10000) == 1 && (p.revents & POLLIN), "the fd became readable");
    int got_state = 0;
    t0 = now_ms();
    while (now_ms() - t0 < 10000 && !got_state) {
        if (mcphost_next_event(h, 500, &ev, NULL) == MCPHOST_OK) {
            if (contains(ev, MCPHOST_EVENT_SERVER_STATE) && contains(ev, "ts2")) got_state = 1;
            mcphost_string_free(ev);
        }
    }
    CHECK(got_state, "a server_state event for ts2 by next_event");
    resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__slow\", \"arguments\": {\"ms\": 350}, \"_meta\": {\"progressToken\": 99}}}", MCPHOST_OK);
    mcphost_string_free(resp);
    int got_progress = 0;
    while (mcphost_next_event(h, 200, &ev, NULL) == MCPHOST_OK) {
        if (contains(ev, "\"progressToken\":99")) got_progress++;
        mcphost_string_free(ev);
    }
    CHECK(got_progress >= 1, "progress by polling with a numeric token: %d", got_progress);
    /* Drained: readable again only when a new event comes (server-everything
     * logs on its own, so an event may already be back). */
    p.revents = 0;
    if (poll(&p, 1, 0) == 1) {
        CHECK_STATUS(mcphost_next_event(h, 0, &ev, NULL), MCPHOST_OK, NULL);
        mcphost_string_free(ev);
    }
    mcphost_free(h);
    return finish("test_events");
}
