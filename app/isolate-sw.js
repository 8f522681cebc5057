// Cross-origin isolation where the host sends no COOP/COEP headers (a plain
// static host): this service worker adds the two headers to every
// same-origin response, so the page and its workers are isolated, its clock
// resolves 5 µs and its rank workers may share memory (ARCHITECTURE.md,
// "Ranks: the same bits on any number of cores"). index.html registers it
// only where the page is not isolated already, and reloads once.
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));
self.addEventListener('fetch', (event) => {
  const request = event.request;
  // A request the browser may answer only from its cache, and anything
  // from another origin, pass through untouched.
  if (request.cache === 'only-if-cached' && request.mode !== 'same-origin') return;
  if (new URL(request.url).origin !== self.location.origin) return;
  event.respondWith(fetch(request).then((response) => {
    if (response.status === 0) return response;
    const headers = new Headers(response.headers);
    headers.set('Cross-Origin-Opener-Policy', 'same-origin');
    headers.set('Cross-Origin-Embedder-Policy', 'require-corp');
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
  }));
});
