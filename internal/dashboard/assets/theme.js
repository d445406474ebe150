// The theme: "auto" (prefers-color-scheme), "light" or "dark", kept in
// localStorage. Loaded by every page before it paints.
const key = 'limbs.theme';
export function theme() { return localStorage.getItem(key) || 'auto'; }
export function setTheme(t) {
  if (t === 'auto') localStorage.removeItem(key); else localStorage.setItem(key, t);
  apply();
}
export function apply() {
  const t = theme();
  if (t === 'auto') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = t;
}
export function dark() {
  const t = theme();
  return t === 'dark' || (t === 'auto' && matchMedia('(prefers-color-scheme: dark)').matches);
}
apply();
