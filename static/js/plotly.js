// plotly.js is 4.7 MB: it is fetched the first time a view draws a chart, never for the first screen.

let loading = null;

// The page's configuration names plotly.js's URL (it carries the version, so it is cached for good).
const URL = JSON.parse(document.getElementById("lab-config").textContent).plotly;

export function loadPlotly() {
  loading ??= new Promise((resolve, reject) => {
    const script = Object.assign(document.createElement("script"), { src: URL });
    script.addEventListener("load", () => resolve(window.Plotly));
    script.addEventListener("error", () => {
      loading = null; // a failed fetch may be tried again
      reject(new Error("The charts could not be loaded. Is the lab server still running?"));
    });
    document.head.append(script);
  });
  return loading;
}
