// The page as a product: light and dark themes, a layout that fits a
// desktop, a tablet and a phone without sideways scrolling, Train and the
// decision boundary where a newcomer looks first, a favicon, and no
// request that fails. Screenshots at three widths in both themes go to
// artifacts/ (kept by CI as test artifacts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { setup, artifacts, text, stepCount, trainUntil, patience } from './harness.mjs';

const ctx = setup();

const WIDTHS = [
  { name: 'desktop', width: 1400, height: 1000 },
  { name: 'tablet', width: 900, height: 1100 },
  { name: 'phone', width: 400, height: 860 },
];

test('three widths, two themes: no sideways scroll, Train and the plot up front, screenshots kept', async () => {
  for (const colorScheme of ['light', 'dark']) {
    for (const { name, width, height } of WIDTHS) {
      const { page, errors } = await ctx.open(`${ctx.root}?engine=cpu`, { viewport: { width, height }, colorScheme });
      await trainUntil(page, 300);
      await page.waitForTimeout(300);
      const layout = await page.evaluate(() => {
        const box = (id) => document.querySelector(`[data-testid=${id}]`).getBoundingClientRect();
        return {
          scrollWidth: document.documentElement.scrollWidth,
          innerWidth: window.innerWidth,
          train: box('train-toggle').top,
          plot: box('decision-boundary').top,
          plotWidth: box('decision-boundary').width,
          background: getComputedStyle(document.body).backgroundColor,
          html: getComputedStyle(document.documentElement).backgroundColor,
        };
      });
      console.log(`${name} ${width}px ${colorScheme}: Train at ${layout.train.toFixed(0)} px, plot at ${layout.plot.toFixed(0)} px (${layout.plotWidth.toFixed(0)} px wide), page ${layout.scrollWidth} px wide`);
      assert.ok(layout.scrollWidth <= layout.innerWidth, `${name} ${colorScheme}: the page scrolls sideways (${layout.scrollWidth} > ${layout.innerWidth})`);
      assert.ok(layout.train < height, `${name}: Train is on the first screen`);
      // The plot is on the first screen at desktop width, and no more than
      // one screen below the top on a phone.
      assert.ok(layout.plot < (width >= 1100 ? height : 2 * height), `${name}: the decision boundary starts at ${layout.plot} px`);
      assert.ok(layout.plotWidth >= Math.min(320, width - 60), `${name}: the decision boundary is large (${layout.plotWidth} px)`);
      const dark = (rgb) => rgb.match(/\d+/g).slice(0, 3).reduce((a, b) => a + Number(b), 0) < 3 * 96;
      assert.equal(dark(layout.html), colorScheme === 'dark', `${colorScheme} theme background: ${layout.html}`);
      await page.screenshot({ path: path.join(artifacts, `page-${width}-${colorScheme}.png`), fullPage: true });
      assert.deepEqual(errors, []);
      await page.close();
    }
  }
});

test('the theme toggle switches themes and is remembered; the favicon loads and no request fails', async () => {
  const page = await ctx.browser.newPage({ viewport: { width: 1200, height: 900 }, colorScheme: 'light' });
  const failed = [];
  page.on('response', (r) => { if (r.status() >= 400) failed.push(`${r.status()} ${r.url()}`); });
  await page.goto(`${ctx.root}?engine=cpu`);
  await page.waitForFunction(() => document.querySelector('[data-testid=backend-name]')?.dataset.settled === 'true', null, { timeout: patience(90_000) });
  const background = () => page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
  const light = await background();
  await page.getByTestId('theme-toggle').click();
  assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
  const dark = await background();
  assert.notEqual(dark, light, 'the background changes with the theme');
  // The pick is this browser's, not the URL's: a reload keeps it.
  await page.reload();
  await page.waitForSelector('[data-testid=theme-toggle]');
  assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
  assert.equal(await background(), dark);
  assert.doesNotMatch(page.url(), /theme/);
  await page.getByTestId('theme-toggle').click();
  assert.equal(await background(), light);
  const icon = await page.evaluate(() => document.querySelector('link[rel=icon]')?.href);
  assert.ok(icon, 'the page names a favicon');
  const response = await page.request.get(icon);
  assert.equal(response.status(), 200, `favicon ${icon}`);
  assert.deepEqual(failed, [], 'no request failed');
  // Friendly wording in the header: the engine and the adapter, no raw
  // enum names.
  assert.doesNotMatch(await text(page, 'backend-name'), /BrowserWebGpu|, ,/);
  assert.ok(await stepCount(page) === 0);
  await page.close();
});
