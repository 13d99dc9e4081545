/* Versions, errors and NULL arguments, and tool calls on both servers. */
#include "harness.h"

int main(void) {
    CHECK(mcphost_abi_version() == MCPHOST_ABI_VERSION, "abi %u", mcphost_abi_version());
    CHECK(strlen(mcphost_version()) > 0, "version");
    CHECK(strcmp(mcphost_status_name(MCPHOST_ERR_TIMEOUT), "MCPHOST_ERR_TIMEOUT") == 0, "name");
    CHECK(strcmp(mcphost_status_name(9999), "MCPHOST_ERR_UNKNOWN") == 0, "unknown name");

    /* NULL and bad arguments give a status and a message, never a crash. */
    char *err = NULL, *resp = NULL;
    mcphost *none = NULL;
    CHECK_STATUS(mcphost_open_embedded(NULL, NULL, &none, &err), MCPHOST_ERR_NULL_ARGUMENT, err);
    CHECK(contains(err, "config_json"), "names the argument: %s", err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_open_embedded("{}", NULL, NULL, NULL), MCPHOST_ERR_NULL_ARGUMENT, NULL);
    CHECK_STATUS(mcphost_request(NULL, "{}", &resp, &err), MCPHOST_ERR_NULL_ARGUMENT, err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_open_embedded("{\"servers\": {\"x\": {\"command\": 5}}}", NULL, &none, &err),
                 MCPHOST_ERR_CONFIG, err);
    CHECK(contains(err, "command"), "config error names the field: %s", err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_open_embedded("{not json", NULL, &none, &err), MCPHOST_ERR_CONFIG, err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_options_set_sampling(NULL, NULL, NULL, NULL), MCPHOST_ERR_NULL_ARGUMENT, NULL);
    mcphost_options *o = mcphost_options_new();
    CHECK_STATUS(mcphost_options_set_sampling(o, NULL, NULL, NULL), MCPHOST_ERR_NULL_ARGUMENT, NULL);
    CHECK_STATUS(mcphost_options_set_elicitation(o, 8, NULL, NULL, NULL), MCPHOST_ERR_INVALID_REQUEST, NULL);
    mcphost_options_free(o);
    mcphost_string_free(NULL);
    mcphost_free(NULL);
    mcphost_responder_free(NULL);
    mcphost_call_free(NULL);
    mcphost_options_free(NULL);

    mcphost *h = open_handle(NULL);
    const char bad_utf8[] = {'{', '"', 'm', '"', ':', '"', (char)0xff, '"', '}', 0};
    CHECK_STATUS(mcphost_request(h, bad_utf8, &resp, &err), MCPHOST_ERR_INVALID_UTF8, err);
    CHECK(contains(err, "request_json"), "%s", err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_request(h, "{\"method\": ", &resp, &err), MCPHOST_ERR_INVALID_JSON, err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_request(h, "{\"params\": {}}", &resp, &err), MCPHOST_ERR_INVALID_REQUEST, err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_request(h, "{\"method\": \"initialize\"}", &resp, &err), MCPHOST_ERR_INVALID_REQUEST, err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_request(h, "{\"method\": \"tools/list\"}", NULL, &err), MCPHOST_ERR_NULL_ARGUMENT, err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_notify(h, "{\"method\": \"notifications/cancelled\"}", &err), MCPHOST_ERR_INVALID_REQUEST, err);
    CHECK(contains(err, "mcphost_cancel"), "%s", err);
    mcphost_string_free(err);
    CHECK_STATUS(mcphost_notify(h, "{\"method\": \"notifications/roots/list_changed\"}", &err), MCPHOST_OK, err);

    /* The catalog has both servers' tools, namespaced. */
    resp = request(h, "{\"jsonrpc\": \"2.0\", \"id\": 41, \"method\": \"" MCPHOST_METHOD_TOOLS_LIST "\"}", MCPHOST_OK);
    CHECK(contains(resp, "\"id\":41"), "echoes the caller's id: %.200s", resp);
    CHECK(contains(resp, "\"ts__echo\""), "test server tools: %.300s", resp);
    CHECK(contains(resp, "\"ev__echo\""), "server-everything tools: %.300s", resp);
    mcphost_string_free(resp);

    resp = request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__echo\", \"arguments\": {\"text\": \"hi from C\"}}}", MCPHOST_OK);
    CHECK(contains(resp, "hi from C"), "%s", resp);
    CHECK(contains(resp, "\"id\":null"), "no id given, null echoed: %s", resp);
    mcphost_string_free(resp);

    resp = request(h, "{\"id\": \"s\", \"method\": \"tools/call\", \"params\": {\"name\": \"ev__echo\", \"arguments\": {\"message\": \"hello everything\"}}}", MCPHOST_OK);
    CHECK(contains(resp, "hello everything"), "%s", resp);
    CHECK(contains(resp, "\"id\":\"s\""), "%s", resp);
    mcphost_string_free(resp);

    /* A JSON-RPC error comes back as the error response, and a status. */
    resp = NULL;
    mcphost_status st = mcphost_request(h, "{\"id\": 7, \"method\": \"tools/call\", \"params\": {\"name\": \"nope__nothing\"}}", &resp, &err);
    CHECK_STATUS(st, MCPHOST_ERR_RPC, err);
    CHECK(contains(resp, "\"error\"") && contains(resp, "\"id\":7"), "%s", resp);
    CHECK(contains(err, "tools/call"), "%s", err);
    mcphost_string_free(resp);
    mcphost_string_free(err);

    /* No elicitation callback, so no elicitation capability: the engine's
     * fallback policy (decline) answers, not a host. */
    resp = NULL;
    st = mcphost_request(h, "{\"method\": \"tools/call\", \"params\": {\"name\": \"ts__elicit\", \"arguments\": {\"message\": \"?\"}}}", &resp, &err);
    CHECK(!contains(resp, "\"action\":\"accept\""), "no host answered: %s", resp);
    CHECK(st == MCPHOST_OK && contains(resp, "decline"), "the fallback declined: %s", resp);
    mcphost_string_free(resp);
    mcphost_string_free(err);

    resp = request(h, "{\"method\": \"" MCPHOST_METHOD_MCPHOST_STATUS "\"}", MCPHOST_OK);
    CHECK(contains(resp, "\"ts\"") || contains(resp, "ts"), "%s", resp);
    mcphost_string_free(resp);

    /* Both modes edit their config through the same methods (embedded: in
     * memory; connected: the daemon's file). */
    resp = request(h, "{\"method\": \"" MCPHOST_METHOD_MCPHOST_SERVERS_DISABLE "\", \"params\": {\"name\": \"ts2\"}}", MCPHOST_OK);
    mcphost_string_free(resp);
    resp = request(h, "{\"method\": \"" MCPHOST_METHOD_MCPHOST_SERVERS_ENABLE "\", \"params\": {\"name\": \"ts2\"}}", MCPHOST_OK);
    mcphost_string_free(resp);

    mcphost_free(h);
#ifdef MCPHOST_TEST_DEBUG_LIBRARY
    /* Debug builds of the library refuse a freed handle. */
    CHECK_STATUS(mcphost_request(h, "{\"method\": \"tools/list\"}", &resp, &err), MCPHOST_ERR_INVALID_HANDLE, err);
    mcphost_string_free(err);
#endif
    return finish("test_basic");
}
