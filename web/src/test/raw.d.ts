// Vite's `?raw` imports (a file's text), as the tests read the stylesheet's colours.
declare module "*?raw" {
  const text: string;
  export default text;
}
