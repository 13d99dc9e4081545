/* A host request the server stops waiting for (its tool call was
 * cancelled, so the server cancels its elicitation) is announced to the
 * host with the request's id, and a late answer is refused. */
#include <pthread.h>
#include "harness.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static mcphost_responder *held = NULL;
static long asked_id = -1, ended_id = -1;

static void on_elicit(void *ud, const char *request_json, mcphost_responder *r) {
    (void)ud;
    const char *id = strstr(request_json, "\"id\":");
    pthread_mutex_lock(&mu);
    asked_id = id ? atol(id + 5) : -2;
    held = r; /* a dialog the user has not answered yet */
    pthread_mutex_unlock(&mu);
}

static void on_event(void *ud, const char *event_json) {
    (void)ud;
    if (!contains(event_json, MCPHOST_EVENT_HOST_REQUEST_ENDED)) return;
    const char *id = strstr(event_json, "\"id\":");
    pthread_mutex_lock(&mu);
    ended_id = id ? atol(id + 5) : -3;
    pthread_mutex_unlock(&mu);
}

static long get(long *v) {
    pthread_mutex_lock(&mu);
    long x = *v;
    pthread_mutex_unlock(&mu);
    return x;
}

static void on_done(void *ud, mcphost_status st, const char *resp, const char *err) {
    (void)ud; (void)st; (void)resp; (void)err;
}

int main(void) {
    mcphost_options *o = mcphost_options_new();
    mcphost_options_set_elicitation(o, MCPHOST_ELICITATION_FORM, on_elicit, NULL, NULL);
    mcphost_options_set_event_callback(o, on_event, NULL, NULL);
    mcphost *h = open_handle(o);
    mcphost_options_free(o);

    mcphost_call *call = NULL;
    char *err = NULL;
    CHECK_STATUS(mcphost_request_async(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__elicit\", \"arguments\": {\"message\": \"Still there?\"}}}",
                                       on_done, NULL, &call, &err), MCPHOST_OK, err);
    for (int i = 0; i < 200 && get(&asked_id) < 0; i++) sleep_ms(25);
    REQUIRE(get(&asked_id) > 0, "the elicitation reached the host with an id (%ld)", get(&asked_id));
    CHECK(get(&ended_id) == -1, "not ended while the server waits");
    CHECK_STATUS(mcphost_cancel(call), MCPHOST_OK, NULL);
    mcphost_call_free(call);
    for (int i = 0; i < 200 && get(&ended_id) < 0; i++) sleep_ms(25);
    CHECK(get(&ended_id) == get(&asked_id), "host_request_ended names the request (%ld, asked %ld)",
          get(&ended_id), get(&asked_id));
    /* The user answers after all: nobody waits any more. */
    mcphost_status st = mcphost_responder_result(held, "{\"action\": \"accept\", \"content\": {}}", &err);
    CHECK_STATUS(st, MCPHOST_ERR_NOT_WAITING, err);
    mcphost_string_free(err);
    mcphost_responder_free(held);
    mcphost_free(h);
    return finish("test_host_ended");
}
