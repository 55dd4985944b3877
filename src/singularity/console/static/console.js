// Small behaviours of the console's pages (no inline scripts: the pages' CSP allows none).
(function () {
  function toBottom() {
    document.querySelectorAll("ol.transcript").forEach(function (list) {
      list.scrollTop = list.scrollHeight;
    });
  }
  document.addEventListener("DOMContentLoaded", toBottom);
  document.body.addEventListener("htmx:afterSettle", toBottom);
  document.body.addEventListener("htmx:afterRequest", function (event) {
    var form = event.detail.elt;
    if (event.detail.successful && form && form.hasAttribute && form.hasAttribute("data-reset")) {
      form.reset();
    }
  });
})();
