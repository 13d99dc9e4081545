// The "browser" of the auth scenarios (MCPHOST_BROWSER): loads the sign-in
// URL mcphost hands it and follows the redirects, as a person clicking
// "allow" would; the suite's authorization server approves at once and
// redirects to mcphost's loopback listener, which ends the sign-in.
const url = process.argv[process.argv.length - 1];
fetch(url, { redirect: "follow" })
	.then(async (r) => {
		await r.text();
		if (!r.ok) {
			console.error(`browser.js: ${url} -> HTTP ${r.status}`);
			process.exit(1);
		}
	})
	.catch((e) => {
		console.error(`browser.js: ${url}: ${e}`);
		process.exit(1);
	});
