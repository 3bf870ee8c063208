// Observations as the pages show them (the replay, play mode): one definition of how arrays read.
// Arrays come as {"__ndarray__": {dtype, shape, url | data | base64}} (stored ones have a URL; image-like
// ones, uint8 HxW, HxWx1, HxWx3 or HxWx4, are PNGs): the text shows a short stand-in, the images show.
window.StudioObservations = (function () {
  const ARRAY = "__ndarray__";
  const isArray = (v) => v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 1 && v[ARRAY] && typeof v[ARRAY] === "object";
  const isImage = (a) => a.dtype === "uint8" && typeof a.url === "string" && a.url.endsWith(".png") &&
    (a.shape.length === 2 || (a.shape.length === 3 && a.shape[2] >= 1 && a.shape[2] <= 4));
  function forText(v) {
    if (isArray(v)) {
      const a = v[ARRAY];
      const head = `${a.dtype} array ${a.shape.join("×")}`;
      if (a.data !== undefined) return a.data;
      // The start of its digest: a frame that changed reads as a changed line.
      const digest = a.sha256 ? `sha256 ${a.sha256.slice(0, 8)}` : "";
      return `<${head}${isImage(a) ? ": image" : ""}${digest ? (isImage(a) ? ", " : ": ") + digest : ""}>`;
    }
    if (Array.isArray(v)) return v.map(forText);
    if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, forText(x)]));
    return v;
  }
  function imagesOf(v, path, out) {
    if (isArray(v)) { if (isImage(v[ARRAY])) out.push({ path: path || "observation", array: v[ARRAY] }); }
    else if (Array.isArray(v)) v.forEach((x, i) => imagesOf(x, `${path}[${i}]`, out));
    else if (v && typeof v === "object") Object.entries(v).forEach(([k, x]) => imagesOf(x, path ? `${path}.${k}` : k, out));
    return out;
  }
  // The observation's images as figures in `container` (hidden when there are none).
  function showImages(container, observation) {
    if (!container) return;
    const images = imagesOf(observation, "", []);
    const figures = container.querySelectorAll("figure");
    // Same images at the same places: only their sources change, so playback does not flicker.
    if (figures.length === images.length) {
      images.forEach((image, i) => { figures[i].querySelector("img").src = image.array.url; });
    } else {
      container.replaceChildren(...images.map((image) => {
        const img = document.createElement("img");
        img.src = image.array.url;
        img.alt = `${image.path}: ${image.array.shape.join("×")} image`;
        const caption = document.createElement("figcaption");
        caption.className = "muted small";
        caption.textContent = `${image.path} · ${image.array.dtype} ${image.array.shape.join("×")}`;
        const figure = document.createElement("figure");
        figure.append(img, caption);
        return figure;
      }));
    }
    container.hidden = !images.length;
  }
  return { ARRAY, isArray, isImage, forText, imagesOf, showImages };
})();
